#!/usr/bin/env python3
"""check_deploy_files.py - the deployment files parse and agree with each other and with the daemon.

  check_deploy_files.py [ATTND_BINARY]

No kubeconform or docker here (neither is packaged by Debian), so this checks what can be checked with
Debian's python3-yaml: every YAML file under docker/ parses; each Kubernetes object has apiVersion, kind
and name, and the objects fit together (Service and PodDisruptionBudget select the Deployment's pods,
the HPA targets it, the volume names the PVC, probes use attnd's /readyz and /healthz on the named
port, non-root read-only security context, resources, a grace period longer than preStop); compose runs
replicas with ATTND_WATCH on one shared volume behind nginx, and nginx.conf's upstream lists exactly
those replicas; the Dockerfile declares what the image promises. Every ATTND_* variable set anywhere
must be a twin of a flag in `attnd --help` (when the binary is given), so a typo cannot pass.
Prints one line per check and "N passed, N failed"; exit status 0 when nothing failed.
"""
import glob
import os
import re
import subprocess
import sys

import yaml

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print("ok   - " + what)
    else:
        failed += 1
        print("FAIL - " + what)
    return ok


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def env_names(container):
    return {e["name"]: e for e in container.get("env", [])}


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(root)
    known_env = None
    if len(sys.argv) > 1:
        out = subprocess.run([sys.argv[1], "--help"], capture_output=True, text=True, timeout=10)
        text = out.stdout + out.stderr
        known_env = set(re.findall(r"ATTND_[A-Z0-9_]+", text))
        known_env |= {"ATTND_" + f.upper().replace("-", "_") for f in re.findall(r"--([a-z][a-z0-9-]+)", text)}
        check(len(known_env) > 5, "attnd --help lists its flags (%d ATTND_* twins)" % len(known_env))

    used_env = {}  # name -> file

    # --- every YAML file parses ---
    docs = {}
    for path in sorted(glob.glob("docker/**/*.yaml", recursive=True) + glob.glob("docker/**/*.yml", recursive=True)):
        try:
            docs[path] = load_all(path)
            check(len(docs[path]) > 0, "%s parses (%d document(s))" % (path, len(docs[path])))
        except yaml.YAMLError as e:
            check(False, "%s parses: %s" % (path, e))
    if not check("docker/compose.yaml" in docs, "docker/compose.yaml exists"):
        return

    # --- Kubernetes objects ---
    objs = {}
    for path, ds in docs.items():
        if not path.startswith("docker/k8s/"):
            continue
        for d in ds:
            ok = isinstance(d, dict) and "apiVersion" in d and "kind" in d
            if ok and d["kind"] != "Kustomization":
                ok = "name" in d.get("metadata", {})
            check(ok, "%s: %s has apiVersion, kind, metadata.name" % (path, d.get("kind") if isinstance(d, dict) else d))
            if ok:
                objs[d["kind"]] = (path, d)
    want = {"Deployment": "apps/v1", "Service": "v1", "HorizontalPodAutoscaler": "autoscaling/v2",
            "PersistentVolumeClaim": "v1"}
    for kind, api in want.items():
        check(kind in objs and objs[kind][1]["apiVersion"] == api, "k8s: a %s (%s)" % (kind, api))
    if "Kustomization" in objs:
        res = objs["Kustomization"][1].get("resources", [])
        files = {os.path.basename(p) for p in docs if p.startswith("docker/k8s/") and not p.endswith("kustomization.yaml")}
        check(set(res) == files, "kustomization.yaml lists every manifest (%s)" % ", ".join(sorted(files)))
    if "Deployment" in objs:
        dep = objs["Deployment"][1]
        spec = dep["spec"]
        pod = spec["template"]["spec"]
        labels = spec["template"]["metadata"]["labels"]
        sel = spec["selector"]["matchLabels"]
        check(all(labels.get(k) == v for k, v in sel.items()), "Deployment selector matches its pod labels")
        c = pod["containers"][0]
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        check(ports.get("http") == 8080, "container port 'http' is 8080")
        env = env_names(c)
        for name in env:
            used_env[name] = objs["Deployment"][0]
        check(env.get("ATTND_HOST", {}).get("value") == "0.0.0.0", "pods listen on 0.0.0.0")
        check(env.get("ATTND_DATA_DIR", {}).get("value") == "/data", "ATTND_DATA_DIR=/data")
        check(str(env.get("ATTND_WATCH", {}).get("value")) in ("1", "true"), "ATTND_WATCH on")
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            hg = c.get(probe, {}).get("httpGet", {})
            check(hg.get("path") == path and hg.get("port") in ("http", 8080), "%s GETs %s" % (probe, path))
        res = c.get("resources", {})
        check(all(k in res.get("requests", {}) and k in res.get("limits", {}) for k in ("cpu", "memory")),
              "resources: cpu and memory requests and limits")
        psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
        check(psc.get("runAsNonRoot") is True and int(psc.get("runAsUser", 0)) != 0, "pod runs as non-root")
        check(csc.get("readOnlyRootFilesystem") is True and csc.get("allowPrivilegeEscalation") is False,
              "read-only root fs, no privilege escalation")
        pre = c.get("lifecycle", {}).get("preStop", {})
        pre_s = 0
        if "exec" in pre and pre["exec"]["command"][0] == "sleep":
            pre_s = int(pre["exec"]["command"][1])
        elif "sleep" in pre:
            pre_s = int(pre["sleep"]["seconds"])
        grace = int(pod.get("terminationGracePeriodSeconds", 30))
        drain = int(env.get("ATTND_DRAIN_TIMEOUT", {}).get("value", 30))
        check(pre_s > 0 and grace > pre_s + drain,
              "preStop %d s + drain timeout %d s fit in terminationGracePeriodSeconds %d" % (pre_s, drain, grace))
        mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        data_vol = [n for n, p in mounts.items() if p == "/data"]
        claim = vols.get(data_vol[0], {}).get("persistentVolumeClaim", {}).get("claimName") if data_vol else None
        if "PersistentVolumeClaim" in objs:
            pvc = objs["PersistentVolumeClaim"][1]
            check(claim == pvc["metadata"]["name"], "/data is mounted from the PVC %s" % claim)
            check("ReadWriteMany" in pvc["spec"]["accessModes"], "the PVC is ReadWriteMany")
        if "Service" in objs:
            svc = objs["Service"][1]["spec"]
            check(all(labels.get(k) == v for k, v in svc["selector"].items()), "Service selects the pods")
            check(all(p.get("targetPort") in ("http", 8080) for p in svc["ports"]), "Service targets port http")
        if "PodDisruptionBudget" in objs:
            pdb = objs["PodDisruptionBudget"][1]["spec"]["selector"]["matchLabels"]
            check(all(labels.get(k) == v for k, v in pdb.items()), "PodDisruptionBudget selects the pods")
        if "HorizontalPodAutoscaler" in objs:
            hpa = objs["HorizontalPodAutoscaler"][1]["spec"]
            ref = hpa["scaleTargetRef"]
            check(ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"], "HPA scales the Deployment")
            check(any(m.get("resource", {}).get("name") == "cpu" for m in hpa.get("metrics", [])), "HPA scales on CPU")
            check(1 <= hpa["minReplicas"] <= hpa["maxReplicas"], "HPA min <= max replicas")

    # --- compose + nginx ---
    comp = docs["docker/compose.yaml"][0]
    svcs = comp.get("services", {})
    replicas = sorted(n for n, s in svcs.items() if "attnd" in str(s.get("image", "")))
    check(len(replicas) >= 2, "compose runs %d attnd replicas (%s)" % (len(replicas), ", ".join(replicas)))
    vols = set()
    for n in replicas:
        s = svcs[n]
        env = s.get("environment", {})
        for name in env:
            used_env[name] = "docker/compose.yaml"
        check(str(env.get("ATTND_WATCH")) in ("1", "true") and env.get("ATTND_HOST") == "0.0.0.0",
              "%s: ATTND_WATCH on, listens on 0.0.0.0" % n)
        check("healthcheck" in s and "--healthcheck" in s["healthcheck"]["test"], "%s: health check" % n)
        g = re.match(r"(\d+)s$", str(s.get("stop_grace_period", "10s")))
        d = int(env.get("ATTND_DRAIN_TIMEOUT", 30))
        check(g is not None and int(g.group(1)) > d,
              "%s: stop_grace_period %s > drain timeout %d s" % (n, s.get("stop_grace_period"), d))
        vols.add(tuple(v for v in s.get("volumes", []) if v.endswith(":/data")))
    check(len(vols) == 1 and len(next(iter(vols))) == 1, "replicas share one /data volume")
    nginx = [n for n, s in svcs.items() if "nginx" in str(s.get("image", ""))]
    check(len(nginx) == 1 and any("nginx.conf" in v for v in svcs[nginx[0]].get("volumes", [])),
          "compose runs nginx with docker/nginx.conf")
    with open("docker/nginx.conf") as f:
        conf = f.read()
    servers = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", conf, re.M)
    check(sorted(h for h, p in servers) == replicas and all(p == "8080" for h, p in servers),
          "nginx upstream = compose replicas (%s)" % ", ".join("%s:%s" % s for s in servers))
    check(re.search(r"proxy_next_upstream\s+[^;]*\berror\b[^;]*\btimeout\b[^;]*\bnon_idempotent\b", conf) is not None,
          "nginx retries errors and timeouts, POST included")
    check(re.search(r"max_fails=\d+", conf) is not None and re.search(r"fail_timeout=\d+", conf) is not None,
          "nginx passive health (max_fails, fail_timeout)")
    check(re.search(r"^\s*keepalive\s+\d+;", conf, re.M) is not None and 'proxy_set_header Connection ""' in conf
          and "proxy_http_version 1.1" in conf, "nginx keeps connections to the replicas alive")
    m = re.search(r"client_max_body_size\s+(\d+)([kmg]?);", conf)
    if m and len(sys.argv) > 1:
        limit = int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)]
        out = subprocess.run([sys.argv[1], "--help"], capture_output=True, text=True, timeout=10).stdout
        dm = re.search(r"--max-body-bytes[^\n]*?(\d{4,})", out)
        if dm:
            check(int(dm.group(1)) == limit,
                  "nginx client_max_body_size %d = attnd's default --max-body-bytes %s" % (limit, dm.group(1)))
        else:
            check(True, "nginx client_max_body_size %d (attnd --help shows no default to compare)" % limit)
    else:
        check(m is not None, "nginx sets client_max_body_size")

    # --- Dockerfile ---
    with open("Dockerfile") as f:
        df = f.read()
    check(len(re.findall(r"^FROM\s", df, re.M)) >= 2, "Dockerfile is multi-stage")
    check(re.search(r"^EXPOSE\s+8080\b", df, re.M) is not None, "Dockerfile EXPOSE 8080")
    user = re.findall(r"^USER\s+(\S+)", df, re.M)
    check(bool(user) and user[-1].split(":")[0] not in ("0", "root"), "Dockerfile USER non-root (%s)" % user)
    check(re.search(r'^HEALTHCHECK\b.*\n?.*CMD \["attnd", "--healthcheck"\]', df, re.M) is not None,
          "Dockerfile HEALTHCHECK attnd --healthcheck")
    check(re.search(r"^STOPSIGNAL\s+SIGTERM", df, re.M) is not None, "Dockerfile STOPSIGNAL SIGTERM")
    check(re.search(r"^VOLUME\s+/data", df, re.M) is not None, "Dockerfile VOLUME /data")
    for name in re.findall(r"\b(ATTND_[A-Z0-9_]+)=", df):
        used_env[name] = "Dockerfile"

    if known_env is not None:
        unknown = sorted("%s (%s)" % (n, f) for n, f in used_env.items() if n not in known_env)
        check(not unknown, "every ATTND_* variable set is a flag's twin%s" % (": unknown " + ", ".join(unknown) if unknown else ""))


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
