// The browser page served at GET /: plain HTML, CSS and JavaScript in one string, no external
// resources. It talks to /v1/ws with the protocol of docs/protocol.md: a chat box (or raw prompt
// continuation), sampling controls, streaming output, a cancel button and live tokens/s.
// An API key field for `rz serve --api-key` (docs/security.md): a non-empty key is offered as the
// WebSocket subprotocol "rz-key.KEY" next to "rz" (a page cannot set an Authorization header on a
// WebSocket), kept in sessionStorage (this tab only, gone with it; never localStorage, never the
// URL). A page cannot see why an upgrade failed, so when a connection closes before it opened the
// page asks GET /v1/models (with the key as a Bearer header, when there is one) whether a key is
// what is missing, and says so instead of retrying. Without a key it behaves as it always did.
// Element ids used by tests/net/page_browser.py: prompt, send, cancel, output, status, tps, ntok,
// key, keymsg.
#include "net/http_handler.hpp"

namespace rz::net {

std::string_view page_html() {
  static constexpr std::string_view kPage = R"RZPAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rz</title>
<style>
:root{--bg:#f6f7f9;--fg:#1d2330;--mute:#6b7280;--line:#d9dde5;--acc:#2557d6;--user:#e8eefc;--bot:#fff}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;background:var(--bg);color:var(--fg)}
header{display:flex;align-items:baseline;gap:12px;padding:10px 18px;border-bottom:1px solid var(--line);background:#fff}
header h1{font-size:18px;margin:0}
header .info{color:var(--mute);font-size:13px}
main{display:grid;grid-template-columns:1fr 250px;gap:16px;padding:16px 18px;max-width:1150px;margin:0 auto}
#log{min-height:320px;max-height:62vh;overflow:auto;background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px}
.msg{white-space:pre-wrap;word-wrap:break-word;padding:8px 11px;border-radius:8px;margin:0 0 10px}
.msg.user{background:var(--user)}
.msg.assistant{background:var(--bot);border:1px solid var(--line)}
.msg .who{display:block;font-size:11px;text-transform:uppercase;letter-spacing:.05em;color:var(--mute)}
.msg.error{background:#fdecec;color:#9b1c1c}
#empty{color:var(--mute)}
form{display:flex;gap:8px;margin-top:10px}
textarea{flex:1;min-height:64px;resize:vertical;font:inherit;padding:8px;border:1px solid var(--line);border-radius:8px}
button{font:inherit;padding:8px 16px;border-radius:8px;border:1px solid var(--acc);background:var(--acc);color:#fff;cursor:pointer}
button.secondary{background:#fff;color:var(--acc)}
button:disabled{opacity:.45;cursor:default}
aside{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px;align-self:start}
aside h2{font-size:13px;margin:0 0 8px;color:var(--mute);text-transform:uppercase;letter-spacing:.05em}
label{display:flex;justify-content:space-between;align-items:center;gap:8px;margin:6px 0;font-size:14px}
label input[type=number],label input[type=text]{width:96px;font:inherit;padding:3px 6px;border:1px solid var(--line);border-radius:6px}
#stats{margin-top:12px;font-size:13px;color:var(--mute);display:grid;grid-template-columns:auto auto;gap:2px 10px}
#stats b{color:var(--fg);font-weight:600}
#status.streaming{color:var(--acc)}#status.error{color:#b91c1c}
header form{margin:0 0 0 auto;gap:6px;align-items:center}
header label{margin:0;font-size:13px;color:var(--mute)}
header input{width:170px;font:inherit;font-size:13px;padding:4px 8px;border:1px solid var(--line);border-radius:6px}
header button{padding:4px 12px;font-size:13px}
#keymsg{background:#fff6e0;border:1px solid #e8c36a;color:#6b4700;border-radius:8px;padding:8px 12px;margin:0 0 10px}
</style></head>
<body>
<header><h1>rz</h1><span class="info" id="model">connecting…</span>
<form id="keyform" autocomplete="off"><label for="key">API key</label>
<input id="key" type="password" placeholder="none" autocomplete="off" spellcheck="false">
<button id="keyuse" type="submit" class="secondary">Use</button></form></header>
<main>
<section>
<div id="keymsg" role="alert" hidden></div>
<div id="log"><div id="empty">Ask something. The answer streams in token by token.</div></div>
<form id="form">
<textarea id="prompt" placeholder="Type a message (Enter sends, Shift+Enter for a new line)"></textarea>
<div style="display:flex;flex-direction:column;gap:6px">
<button id="send" type="submit">Send</button>
<button id="cancel" type="button" class="secondary" disabled>Cancel</button>
</div>
</form>
</section>
<aside>
<h2>Sampling</h2>
<label>chat template<input id="chat" type="checkbox" checked></label>
<label>temperature<input id="temperature" type="number" min="0" step="0.05" value="0.7"></label>
<label>top-k<input id="top_k" type="number" min="0" step="1" value="40"></label>
<label>top-p<input id="top_p" type="number" min="0.01" max="1" step="0.01" value="0.95"></label>
<label>min-p<input id="min_p" type="number" min="0" max="1" step="0.01" value="0.05"></label>
<label>max tokens<input id="max_tokens" type="number" min="1" step="1" value="256"></label>
<label>seed<input id="seed" type="text" placeholder="random"></label>
<div id="stats">
<span>status</span><b id="status">connecting</b>
<span>tokens</span><b id="ntok">0</b>
<span>tokens/s</span><b id="tps">–</b>
<span>first token</span><b id="ttft">–</b>
</div>
</aside>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let ws = null, cur = null, history = [], seq = 0, backoff = 500, retry = null, usedKey = "";
const KEY_ITEM = "rz-api-key";  // in sessionStorage: this tab only, gone when it closes

function storedKey() { try { return sessionStorage.getItem(KEY_ITEM) || ""; } catch (e) { return ""; } }
function storeKey(k) {
  try { if (k) sessionStorage.setItem(KEY_ITEM, k); else sessionStorage.removeItem(KEY_ITEM); } catch (e) {}
}
function keyMsg(text) { $("keymsg").textContent = text || ""; $("keymsg").hidden = !text; }

function setStatus(s, cls) { $("status").textContent = s; $("status").className = cls || ""; }
function busy(on) { $("send").disabled = on || !ws || ws.readyState !== 1; $("cancel").disabled = !on; }

function addMsg(role, text) {
  const e = $("empty"); if (e) e.remove();
  const d = document.createElement("div");
  d.className = "msg " + role;
  const w = document.createElement("span"); w.className = "who";
  w.textContent = role === "user" ? "you" : role;
  const t = document.createElement("span"); t.className = "text"; t.textContent = text;
  d.append(w, t); $("log").append(d); $("log").scrollTop = $("log").scrollHeight;
  return t;
}

function connect() {
  if (retry) { clearTimeout(retry); retry = null; }
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws";
  const key = $("key").value.trim();
  let sock;
  try {
    // The key as a subprotocol next to "rz" (the server selects "rz"); never in the URL.
    sock = key ? new WebSocket(url, ["rz", "rz-key." + key]) : new WebSocket(url);
  } catch (e) {  // a SyntaxError: the key holds characters a subprotocol cannot
    ws = null; usedKey = key;
    setStatus("API key not usable", "error"); busy(false);
    keyMsg("This API key has characters a browser cannot send to the server: it may hold " +
           "letters, digits and ! # $ % & ' * + - . ^ _ ` | ~ only.");
    return;
  }
  ws = sock; usedKey = key;
  let opened = false;
  sock.onopen = () => {
    if (sock !== ws) return;
    opened = true;
    // A first frame at once: the server closes a connection that sends none within its
    // first-frame timeout (the prompt may take the user longer to type).
    sock.send(JSON.stringify({type: "ping"}));
    backoff = 500; keyMsg(""); setStatus("ready"); busy(false);
  };
  sock.onclose = () => {
    if (sock !== ws) return;  // replaced (a new key): the new socket reports
    if (cur) finish("error: connection closed", "error");
    busy(false); $("send").disabled = true;
    if (opened) return retryLater();
    // Refused before it opened: a page cannot see the status (401 for a missing key), so ask
    // the API, with the same key, whether the key is what is wrong.
    keyRefused(key).then((refused) => {
      if (sock !== ws) return;
      if (!refused) return retryLater();
      setStatus(key ? "API key refused" : "API key needed", "error");
      keyMsg(key ? "The server refused this API key. Check it in the API key field and press Enter."
                 : "This server needs an API key: type it in the API key field (top right) and press Enter.");
      $("key").focus();
    });
  };
  sock.onmessage = (ev) => { if (sock === ws) onFrame(JSON.parse(ev.data)); };
}

function retryLater() {
  setStatus("disconnected, retrying", "error");
  retry = setTimeout(connect, backoff); backoff = Math.min(backoff * 2, 8000);
}

// Whether the server refuses this key (or its absence): 401 from GET /v1/models. No answer within
// 10 s (or none at all) counts as no: the page retries as for any lost connection.
function keyRefused(key) {
  const headers = key ? {Authorization: "Bearer " + key} : {};
  const answer = fetch("/v1/models", {headers, cache: "no-store"}).then((r) => r.status === 401, () => false);
  return Promise.race([answer, new Promise((done) => setTimeout(() => done(false), 10000))]);
}

// A key typed in (Enter or "Use"): remembered for this tab, and a new connection with it unless
// the open one already uses it.
function useKey() {
  const key = $("key").value.trim();
  storeKey(key);
  if (ws && ws.readyState === 1 && key === usedKey) return;
  const old = ws; ws = null;
  if (cur) finish("error: connection closed", "error");
  if (old) old.close();
  backoff = 500; keyMsg(""); setStatus("connecting"); busy(false);
  connect();
}

function onFrame(f) {
  if (!cur || f.id !== cur.id) return;
  if (f.type === "token") {
    if (cur.first === null) {
      cur.first = performance.now();
      $("ttft").textContent = (cur.first - cur.start).toFixed(0) + " ms";
    }
    cur.text += f.text; cur.n += f.tokens.length;
    cur.out.textContent = cur.text;
    $("log").scrollTop = $("log").scrollHeight;
    $("ntok").textContent = cur.n;
    const dt = (performance.now() - cur.first) / 1000;
    if (cur.n > 1 && dt > 0) $("tps").textContent = ((cur.n - 1) / dt).toFixed(1);
  } else if (f.type === "done") {
    if (f.timings && f.timings.ttft_ms != null) $("ttft").textContent = f.timings.ttft_ms.toFixed(0) + " ms";
    finish(f.finish_reason === "cancelled" ? "cancelled" : "done");
  } else if (f.type === "error") {
    const e = addMsg("error", f.code + ": " + f.message); e.parentNode.classList.add("error");
    finish("error: " + f.code, "error");
  }
}

function finish(state, cls) {
  if (cur.chat && cur.text) history.push({role: "assistant", content: cur.text});
  cur = null;
  setStatus(state, cls); busy(false);
}

function num(id) { const v = $(id).value.trim(); return v === "" ? null : Number(v); }

function send() {
  const text = $("prompt").value;
  if (!text.trim() || cur || !ws || ws.readyState !== 1) return;
  const chat = $("chat").checked;
  const req = {type: "generate", id: "p" + (++seq), max_tokens: num("max_tokens"),
    temperature: num("temperature"), top_k: num("top_k"), top_p: num("top_p"), min_p: num("min_p")};
  const seed = $("seed").value.trim();
  if (seed !== "") req.seed = Number(seed);
  if (chat) { history.push({role: "user", content: text}); req.messages = history.slice(); }
  else { history = []; req.prompt = text; }
  addMsg("user", text);
  const old = $("output"); if (old) old.removeAttribute("id");
  const out = addMsg("assistant", ""); out.id = "output";
  cur = {id: req.id, chat, text: "", n: 0, start: performance.now(), first: null, out};
  $("ntok").textContent = "0"; $("tps").textContent = "–"; $("ttft").textContent = "–";
  $("prompt").value = "";
  setStatus("streaming", "streaming"); busy(true);
  ws.send(JSON.stringify(req));
}

$("form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
$("keyform").addEventListener("submit", (e) => { e.preventDefault(); useKey(); });
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
});
$("cancel").addEventListener("click", () => {
  if (cur && ws && ws.readyState === 1) ws.send(JSON.stringify({type: "cancel", id: cur.id}));
});
$("chat").addEventListener("change", () => { history = []; });
fetch("/health").then((r) => r.json()).then((h) => {
  $("model").textContent = h.model + " · " + h.slots.max + " slots";
}).catch(() => {});
$("key").value = storedKey();
connect();
</script>
</body></html>
)RZPAGE";
  return kPage;
}

}  // namespace rz::net
