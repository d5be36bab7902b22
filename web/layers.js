// layers.js - the layers panel (list, create, upload safetensors, delete) and the API key prompt.
// The key lives in sessionStorage: this tab only, gone when it closes.

import {h, $} from "./dom.js";
import {AttndError} from "./attnd.js";
import {count} from "./format.js";

/** The list of layers, the current one marked, and the layer <select> of the header. */
export function renderLayerList(app) {
  const cur = app.state.layer;
  $("#layer-list").replaceChildren(...app.layers.map((l) =>
    h("li", {}, h("button", {type: "button", "aria-current": String(l.name === cur), dataset: {layer: l.name},
                             onclick: () => app.setState(app.resetFor(l.name), {push: true})},
      h("span", {}, l.name),
      h("span", {class: "muted"}, `E${l.config.embed_dim} H${l.config.num_heads} · ${count(l.parameter_count)}`)))));
  const sel = $("#layer-select");
  sel.replaceChildren(...app.layers.map((l) => h("option", {value: l.name}, l.name)));
  if (cur && !app.layers.some((l) => l.name === cur)) sel.append(h("option", {value: cur}, `${cur} (missing)`));
  sel.value = cur;
  $("#delete-layer").disabled = !app.layers.some((l) => l.name === cur);
}

/**
 * Asks for the API key (reason: the daemon's message). Resolves true when a key was given
 * (and stored for this tab), false when the user cancelled.
 */
export function askKey(app, reason) {
  const dlg = $("#key-dialog");
  $("#key-reason").textContent = `${reason ? `The daemon at ${app.apiOrigin} asks for its API key: ${reason}` : `The API key of the daemon at ${app.apiOrigin}, for this tab only.`}`;
  $("#key-input").value = "";
  return new Promise((resolve) => {
    dlg.addEventListener("close", function onClose() {
      dlg.removeEventListener("close", onClose);
      const v = dlg.returnValue;
      if (v === "ok" && $("#key-input").value) {
        app.setKey($("#key-input").value);
        resolve(true);
      } else {
        if (v === "forget") app.setKey(null);
        resolve(false);
      }
    });
    dlg.showModal();
    $("#key-input").focus();
  });
}

export function initLayersPanel(app) {
  $("#key-button").addEventListener("click", () => askKey(app, ""));

  $("#create-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const num = (n) => (f[n].value === "" ? undefined : Number(f[n].value));
    let config = {embed_dim: num("embed_dim"), num_heads: num("num_heads"), kdim: num("kdim"), vdim: num("vdim"),
                  bias: f.bias.checked, add_bias_kv: f.add_bias_kv.checked, add_zero_attn: f.add_zero_attn.checked};
    try {
      if (f.extra.value.trim()) config = {...config, ...JSON.parse(f.extra.value)};
    } catch (e) {
      return app.message(`more config: not JSON (${e.message})`);
    }
    for (const k of Object.keys(config)) if (config[k] === undefined) delete config[k];
    const name = f.name.value.trim();
    const spec = {config, init: {method: "xavier_uniform", seed: num("seed") ?? 0}};
    try {
      // create only (If-None-Match: *): a layer of that name is replaced only once the user says so,
      // its parameters being lost with it
      let replaced = false;
      try {
        await app.call((c) => c.put(name, spec, {ifNoneMatch: "*"}));
      } catch (e) {
        if (!(e instanceof AttndError && e.status === 409 && e.field === "If-None-Match")) throw e;
        if (!confirm(`A layer "${name}" exists. Replace it with a new one (its parameters are lost)?`)) {
          app.message(`kept the layer "${name}"; choose another name to create one`);
          return;
        }
        await app.call((c) => c.put(name, spec));
        replaced = true;
      }
      app.message("");
      await app.refreshLayers();
      app.setState(app.resetFor(name), {push: true});
      if (replaced && name === app.state.layer) app.loadLayer(); /* the same name: read it again */
      app.notice(`${replaced ? "replaced" : "created"} layer ${name}`);
    } catch (e) {
      app.message(app.errorText(e));
    }
  });

  $("#upload-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const file = f.file.files[0];
    if (!file) return;
    const name = f.name.value.trim() || app.state.layer;
    const bytes = new Uint8Array(await file.arrayBuffer());
    const exists = app.layers.some((l) => l.name === name);
    try {
      if (exists) await app.call((c) => c.putWeights(name, bytes));
      else await app.call((c) => c.putSafetensors(name, bytes));
      app.message("");
      await app.refreshLayers();
      if (name === app.state.layer) app.loadLayer();
      else app.setState(app.resetFor(name), {push: true});
      app.notice(`${exists ? "replaced the weights of" : "created"} ${name} from ${file.name}`);
    } catch (e) {
      app.message(app.errorText(e));
    }
  });

  $("#delete-layer").addEventListener("click", async () => {
    const name = app.state.layer;
    if (!name || !confirm(`Delete the layer "${name}"?`)) return;
    try {
      await app.call((c) => c.delete(name));
      app.message("");
      const left = await app.refreshLayers();
      app.setState(app.resetFor(left.length ? left[0].name : ""), {push: true});
      app.notice(`deleted ${name}`);
    } catch (e) {
      app.message(app.errorText(e));
    }
  });
}
