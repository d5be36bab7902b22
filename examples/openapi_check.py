#!/usr/bin/python3
"""openapi_check.py URL - what an OpenAPI tool (Swagger UI, a client generator) does first with the
daemon's contract: GET URL/openapi.yaml and load it with a YAML parser (Debian's python3-yaml), then
walk it: an OpenAPI 3.1 document whose every operation has responses, whose every $ref resolves, and
whose served copy names the routes a client calls. Ends with "N passed, N failed"."""
import sys
import urllib.request

import yaml

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def refs(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                out.append(v)
            else:
                refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def resolve(doc, ref):
    if not ref.startswith("#/"):
        return False
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def main():
    url = sys.argv[1].rstrip("/")
    text = urllib.request.urlopen(url + "/openapi.yaml").read().decode("utf-8")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        check(False, "openapi.yaml is YAML: %s" % str(e).replace("\n", " "))
        return
    check(isinstance(doc, dict) and str(doc.get("openapi", "")).startswith("3.1"),
          "an OpenAPI 3.1 document")
    paths = doc.get("paths", {}) if isinstance(doc, dict) else {}
    for route in ("/v1/layers", "/v1/layers/{name}", "/v1/layers/{name}/forward",
                  "/v1/layers/{name}/trace", "/v2/models/{name}/infer", "/healthz"):
        check(route in paths, "the contract has %s" % route)
    ops = 0
    for route, item in paths.items():
        for method, op in (item or {}).items():
            if method in ("get", "put", "post", "delete", "head", "patch"):
                ops += 1
                check(isinstance(op, dict) and op.get("responses"),
                      "%s %s has responses" % (method.upper(), route))
    check(ops >= 20, "at least 20 operations (found %d)" % ops)
    found = []
    refs(doc, found)
    for ref in sorted(set(found)):
        check(resolve(doc, ref), "$ref %s resolves" % ref)
    print("openapi.yaml: %d operations, %d distinct $ref" % (ops, len(set(found))))


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
