// The playground's logic: plain browser JavaScript over the public Speech API (no framework, no build).
// - Every call carries the API key typed in the header (Authorization: Bearer), kept in localStorage.
// - Streaming plays raw 16-bit PCM (stream_format=audio) through Web Audio as it arrives; otherwise
//   the whole clip goes to an <audio> element. Time to first audio and the real-time factor
//   (processing seconds / audio seconds: below 1 is faster than real time) are shown either way.
// - "Live text" plays a voice agent: the text goes word by word over the WebSocket
//   (/v1/audio/speech/stream, split_granularity "incremental": one running generation takes every
//   word), the audio frames play as they come; Stop sends input.cancel (barge-in) and waits for the
//   cancelled session.done. The mode in effect and the cancellation land in #stats's data-*.
// - Errors are the API's own messages ({"error": {"message": ...}}).
// - The numbers shown are also in #stats's data-* attributes, which the browser test reads.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "triton-tts-api-key";
const state = { models: [], voices: null, controller: null, recorder: null, recorded: null, audioCtx: null,
  live: null };
const LIVE_WORDS_PER_SECOND = 15;

// --- API -------------------------------------------------------------------------------------------

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function apiError(res) {
  let message = res.status + " " + res.statusText;
  try {
    const body = await res.json();
    if (body && body.error) message = typeof body.error === "string" ? body.error : body.error.message;
  } catch (e) { /* not JSON: keep the status line */ }
  return new Error(message);
}

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.headers);
  const res = await fetch(path, opts);
  if (!res.ok) throw await apiError(res);
  return res;
}

function showError(err) {
  const box = $("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = err.message || String(err);
  box.hidden = false;
}

// --- listings --------------------------------------------------------------------------------------

function option(value, label) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = label === undefined ? value : label;
  return o;
}

function selectedModel() {
  const id = $("model").value;
  return state.models.find((m) => m.id === id) || state.models.find((m) => m.task_type === "CustomVoice") || state.models[0];
}

function fillLanguages() {
  const model = selectedModel();
  const select = $("language");
  const previous = select.value || "Auto";
  select.replaceChildren();
  for (const lang of (model && model.languages) || ["Auto"]) select.append(option(lang));
  select.value = [...select.options].some((o) => o.value === previous) ? previous : "Auto";
}

function fillVoices() {
  const select = $("voice");
  const previous = select.value;
  select.replaceChildren(option("", "(default)"));
  const v = state.voices || { voices: [], uploaded_voices: [] };
  const uploaded = new Set((v.uploaded_voices || []).map((u) => u.name));
  const groups = [
    ["Presets", v.voices.filter((n) => !uploaded.has(n))],
    ["OpenAI names", Object.keys(v.voice_aliases || {})],
    ["Uploaded", [...uploaded]],
  ];
  for (const [label, names] of groups) {
    if (!names.length) continue;
    const group = document.createElement("optgroup");
    group.label = label;
    for (const name of names) {
      const alias = (v.voice_aliases || {})[name];
      group.append(option(name, alias ? name + " → " + alias : name));
    }
    select.append(group);
  }
  if ([...select.options].some((o) => o.value === previous)) select.value = previous;
}

function fillVoiceList() {
  const list = $("voice-list");
  list.replaceChildren();
  const uploaded = (state.voices && state.voices.uploaded_voices) || [];
  if (!uploaded.length) {
    const li = document.createElement("li");
    li.className = "empty";
    li.textContent = "none yet";
    list.append(li);
  }
  for (const voice of uploaded) {
    const li = document.createElement("li");
    li.dataset.voice = voice.name;
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = voice.name;
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = [voice.speaker_description, voice.ref_text ? "“" + voice.ref_text + "”" : "x-vector only"]
      .filter(Boolean).join(" · ");
    const use = document.createElement("button");
    use.textContent = "Use";
    use.addEventListener("click", () => { $("voice").value = voice.name; });
    const del = document.createElement("button");
    del.textContent = "Delete";
    del.className = "delete";
    del.addEventListener("click", () => deleteVoice(voice.name));
    li.append(name, meta, use, del);
    list.append(li);
  }
}

async function loadVoices() {
  state.voices = await (await api("/v1/audio/voices")).json();
  fillVoices();
  fillVoiceList();
}

async function loadAll() {
  showError(null);
  try {
    const models = await (await api("/v1/models")).json();
    state.models = models.data;
    const select = $("model");
    const previous = select.value;
    select.replaceChildren(option("", "(routed by voice)"));
    for (const m of state.models) {
      select.append(option(m.id, m.alias_of ? m.id + " → " + m.alias_of : m.id + " (" + m.task_type + ")"));
    }
    if ([...select.options].some((o) => o.value === previous)) select.value = previous;
    fillLanguages();
    await loadVoices();
  } catch (err) {
    showError(err);
  }
}

async function checkReady() {
  const badge = $("server-status");
  try {
    const res = await fetch("/ready");
    const body = await res.json();
    badge.textContent = body.status === "ready" ? "ready" : body.status;
    badge.className = "badge " + (res.ok ? "ok" : "bad");
  } catch (err) {
    badge.textContent = "unreachable";
    badge.className = "badge bad";
  }
}

// --- speaking --------------------------------------------------------------------------------------

function setStats(values) {
  const stats = $("stats");
  for (const [key, value] of Object.entries(values)) stats.dataset[key] = String(value);
  const d = stats.dataset;
  const num = (k) => (d[k] === undefined || d[k] === "" ? null : Number(d[k]));
  const fmt = (v, unit, digits) => (v === null || Number.isNaN(v) ? "–" : v.toFixed(digits) + unit);
  $("stat-ttfa").textContent = num("ttfaMs") === null ? "–" : Math.round(num("ttfaMs")) + " ms";
  $("stat-rtf").textContent = fmt(num("rtf"), "", 2);
  $("stat-audio").textContent = fmt(num("audioSeconds"), " s", 2);
  $("stat-bytes").textContent = num("bytes") === null ? "–" : (num("bytes") / 1024).toFixed(1) + " KiB";
  $("stat-played").textContent = fmt(num("playedSeconds"), " s", 2);
}

function requestBody(stream) {
  const body = { input: $("text").value };
  const model = $("model").value;
  if (model) body.model = model;
  if ($("voice").value) body.voice = $("voice").value;
  const language = $("language").value;
  if (language && language !== "Auto") body.language = language;
  const instructions = $("instructions").value.trim();
  if (instructions) body.instructions = instructions;
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if ($("max-frames").value !== "") body.max_new_tokens = Number($("max-frames").value);
  if (stream) {
    body.response_format = "pcm";
    body.stream_format = "audio";
  } else {
    body.response_format = $("format").value;
    const speed = Number($("speed").value);
    if (speed !== 1) body.speed = speed;
  }
  return body;
}

function audioContext() {
  // Created on the first click (browsers only start audio after a user gesture).
  if (!state.audioCtx) state.audioCtx = new AudioContext();
  if (state.audioCtx.state === "suspended") state.audioCtx.resume();
  return state.audioCtx;
}

async function speakStreaming(signal) {
  const rate = (selectedModel() || {}).sample_rate || 24000;
  const ctx = audioContext();
  const started = performance.now();
  const res = await api("/v1/audio/speech", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(requestBody(true)), signal,
  });
  const reader = res.body.getReader();
  let bytes = 0, samples = 0, carry = null, playAt = 0, startAt = null;
  const timer = setInterval(() => {
    if (startAt !== null) setStats({ playedSeconds: Math.max(0, Math.min(ctx.currentTime - startAt, samples / rate)) });
  }, 100);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (bytes === 0) setStats({ ttfaMs: performance.now() - started });
      bytes += value.byteLength;
      let data = value;
      if (carry) {  // a 16-bit sample may be split across network chunks
        data = new Uint8Array(carry.length + value.length);
        data.set(carry);
        data.set(value, carry.length);
        carry = null;
      }
      const whole = data.length - (data.length % 2);
      if (whole < data.length) carry = data.slice(whole);
      const n = whole / 2;
      if (n > 0) {
        const view = new DataView(data.buffer, data.byteOffset, whole);
        const buffer = ctx.createBuffer(1, n, rate);
        const out = buffer.getChannelData(0);
        for (let i = 0; i < n; i++) out[i] = view.getInt16(2 * i, true) / 32768;
        const source = ctx.createBufferSource();
        source.buffer = buffer;
        source.connect(ctx.destination);
        if (startAt === null) { startAt = ctx.currentTime + 0.05; playAt = startAt; }
        playAt = Math.max(playAt, ctx.currentTime);  // after a stall, resume at once
        source.start(playAt);
        playAt += n / rate;
        samples += n;
      }
      const seconds = samples / rate;
      setStats({ bytes, audioSeconds: seconds, rtf: seconds > 0 ? (performance.now() - started) / 1000 / seconds : "" });
    }
    // Keep reporting playback until the scheduled audio has played.
    while (startAt !== null && ctx.currentTime < playAt && !signal.aborted) {
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    clearInterval(timer);
    if (startAt !== null) setStats({ playedSeconds: Math.max(0, Math.min(ctx.currentTime - startAt, samples / rate)) });
  }
}

function playPcm(ctx, rate, data, clock) {
  // 16-bit little-endian mono PCM -> a buffer source scheduled right after the previous one.
  const n = Math.floor(data.byteLength / 2);
  if (n === 0) return 0;
  const view = new DataView(data, 0, n * 2);
  const buffer = ctx.createBuffer(1, n, rate);
  const out = buffer.getChannelData(0);
  for (let i = 0; i < n; i++) out[i] = view.getInt16(2 * i, true) / 32768;
  const source = ctx.createBufferSource();
  source.buffer = buffer;
  source.connect(ctx.destination);
  if (clock.startAt === null) { clock.startAt = ctx.currentTime + 0.05; clock.playAt = clock.startAt; }
  clock.playAt = Math.max(clock.playAt, ctx.currentTime);
  source.start(clock.playAt);
  clock.playAt += n / rate;
  return n;
}

function wsUrl() {
  const url = new URL("/v1/audio/speech/stream", window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const key = $("api-key").value.trim();
  if (key) url.searchParams.set("api_key", key);  // browsers cannot set headers on a WebSocket
  return url.toString();
}

function speakLive() {
  // The text as an LLM would send it: one input.text per word, then input.done.
  const ctx = audioContext();
  const words = $("text").value.split(/\s+/).filter((w) => w);
  const body = requestBody(true);
  const config = { type: "session.config", stream_audio: true, response_format: "pcm", split_granularity: "incremental" };
  for (const k of ["model", "voice", "language", "instructions", "seed", "max_new_tokens"]) {
    if (body[k] !== undefined) config[k] = body[k];
  }
  const ws = new WebSocket(wsUrl());
  ws.binaryType = "arraybuffer";
  const live = { ws, timers: [], cancelled: false };
  state.live = live;
  const clock = { startAt: null, playAt: 0 };
  let started = null, bytes = 0, samples = 0, rate = 24000;
  return new Promise((resolve, reject) => {
    ws.onopen = () => {
      ws.send(JSON.stringify(config));
      started = performance.now();
      words.forEach((word, i) => {
        live.timers.push(setTimeout(() => {
          if (ws.readyState === WebSocket.OPEN && !live.cancelled) {
            ws.send(JSON.stringify({ type: "input.text", text: i === 0 ? word : " " + word }));
          }
        }, (1000 * i) / LIVE_WORDS_PER_SECOND));
      });
      live.timers.push(setTimeout(() => {
        if (ws.readyState === WebSocket.OPEN && !live.cancelled) ws.send(JSON.stringify({ type: "input.done" }));
      }, (1000 * words.length) / LIVE_WORDS_PER_SECOND));
    };
    ws.onmessage = (event) => {
      if (typeof event.data !== "string") {
        if (live.cancelled) return;
        if (bytes === 0) setStats({ ttfaMs: performance.now() - started });
        bytes += event.data.byteLength;
        samples += playPcm(ctx, rate, event.data, clock);
        const seconds = samples / rate;
        setStats({ bytes, audioSeconds: seconds, rtf: seconds > 0 ? (performance.now() - started) / 1000 / seconds : "" });
        return;
      }
      const msg = JSON.parse(event.data);
      if (msg.type === "session.configured") setStats({ mode: msg.split_granularity });
      else if (msg.type === "audio.start") rate = msg.sample_rate;
      else if (msg.type === "audio.done" && msg.cancelled) setStats({ cancelled: "true" });
      else if (msg.type === "error") reject(new Error(msg.message));
      else if (msg.type === "session.done") {
        ws.send(JSON.stringify({ type: "session.close" }));
        resolve();
      }
    };
    ws.onerror = () => reject(new Error("the WebSocket failed"));
    ws.onclose = () => resolve();
  }).finally(() => {
    live.timers.forEach(clearTimeout);
    if (state.live === live) state.live = null;
  });
}

async function speakWhole(signal) {
  const started = performance.now();
  const res = await api("/v1/audio/speech", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(requestBody(false)), signal,
  });
  const blob = await res.blob();
  const elapsed = (performance.now() - started) / 1000;
  setStats({ ttfaMs: elapsed * 1000, bytes: blob.size });
  const player = $("player");
  if (player.src) URL.revokeObjectURL(player.src);
  player.src = URL.createObjectURL(blob);
  player.onloadedmetadata = () => {
    if (Number.isFinite(player.duration) && player.duration > 0) {
      setStats({ audioSeconds: player.duration, rtf: elapsed / player.duration });
    }
  };
  player.ontimeupdate = () => setStats({ playedSeconds: player.currentTime });
  await player.play().catch(() => { /* autoplay refused: the controls are there */ });
}

async function speak() {
  showError(null);
  setStats({ ttfaMs: "", rtf: "", audioSeconds: "", bytes: "", playedSeconds: "", done: "false", mode: "",
    cancelled: "" });
  state.controller = new AbortController();
  $("speak").disabled = true;
  $("stop").disabled = false;
  try {
    if ($("live").checked) await speakLive();
    else if ($("stream").checked) await speakStreaming(state.controller.signal);
    else await speakWhole(state.controller.signal);
  } catch (err) {
    if (err.name !== "AbortError") showError(err);
  } finally {
    setStats({ done: "true" });
    $("speak").disabled = false;
    $("stop").disabled = true;
    state.controller = null;
  }
}

function stop() {
  const live = state.live;
  if (live && live.ws.readyState === WebSocket.OPEN && !live.cancelled) {
    // Barge-in: the session stays; the server cancels the generation and answers session.done.
    live.cancelled = true;
    live.timers.forEach(clearTimeout);
    live.ws.send(JSON.stringify({ type: "input.cancel" }));
  }
  if (state.controller) state.controller.abort();  // closes the stream: the server cancels the work
  if (state.audioCtx) { state.audioCtx.close(); state.audioCtx = null; }
  $("player").pause();
}

// --- voices ----------------------------------------------------------------------------------------

async function startRecording() {
  showError(null);
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const recorder = new MediaRecorder(stream);
    const chunks = [];
    recorder.ondataavailable = (e) => { if (e.data.size) chunks.push(e.data); };
    recorder.onstop = () => {
      stream.getTracks().forEach((t) => t.stop());
      state.recorded = new Blob(chunks, { type: recorder.mimeType || "audio/webm" });
      const sample = $("sample");
      sample.src = URL.createObjectURL(state.recorded);
      sample.hidden = false;
      $("voice-file").value = "";
    };
    recorder.start();
    state.recorder = recorder;
    $("record").disabled = true;
    $("record-stop").disabled = false;
  } catch (err) {
    showError(new Error("Microphone: " + (err.message || err.name)));
  }
}

function stopRecording() {
  if (state.recorder && state.recorder.state !== "inactive") state.recorder.stop();
  state.recorder = null;
  $("record").disabled = false;
  $("record-stop").disabled = true;
}

async function uploadVoice() {
  showError(null);
  const file = $("voice-file").files[0];
  const sample = file || state.recorded;
  try {
    if (!$("consent").checked) throw new Error("Confirm that the speaker agreed to be cloned (the consent box).");
    if (!sample) throw new Error("Record a sample or choose a file first.");
    const form = new FormData();
    const type = sample.type || "audio/webm";
    const ext = (type.split("/")[1] || "webm").split(";")[0];
    form.append("audio_sample", sample, file ? file.name : "recording." + ext);
    form.append("name", $("voice-name").value.trim());
    form.append("consent", "playground-" + new Date().toISOString());
    const text = $("voice-text").value.trim();
    if (text) form.append("ref_text", text);
    const description = $("voice-description").value.trim();
    if (description) form.append("speaker_description", description);
    const res = await api("/v1/audio/voices", { method: "POST", body: form });
    const uploaded = (await res.json()).voice.name;
    await loadVoices();
    $("voice").value = uploaded;
  } catch (err) {
    showError(err);
  }
}

async function deleteVoice(name) {
  showError(null);
  try {
    await api("/v1/audio/voices/" + encodeURIComponent(name), { method: "DELETE" });
    await loadVoices();
  } catch (err) {
    showError(err);
  }
}

// --- wiring ----------------------------------------------------------------------------------------

function init() {
  const key = $("api-key");
  key.value = localStorage.getItem(KEY_STORAGE) || "";
  key.addEventListener("change", () => { localStorage.setItem(KEY_STORAGE, key.value.trim()); loadAll(); });
  $("model").addEventListener("change", fillLanguages);
  $("speed").addEventListener("input", () => { $("speed-value").textContent = Number($("speed").value).toFixed(2); });
  $("stream").addEventListener("change", () => {
    // Streams are raw PCM at speed 1 (the API's rule); the other controls apply to whole clips.
    $("format").disabled = $("speed").disabled = $("stream").checked;
  });
  $("format").disabled = $("speed").disabled = $("stream").checked;
  $("speak").addEventListener("click", speak);
  $("stop").addEventListener("click", stop);
  $("record").addEventListener("click", startRecording);
  $("record-stop").addEventListener("click", stopRecording);
  $("voice-file").addEventListener("change", () => {
    const file = $("voice-file").files[0];
    if (!file) return;
    state.recorded = null;
    const sample = $("sample");
    sample.src = URL.createObjectURL(file);
    sample.hidden = false;
  });
  $("upload").addEventListener("click", uploadVoice);
  checkReady();
  loadAll();
}

document.addEventListener("DOMContentLoaded", init);
