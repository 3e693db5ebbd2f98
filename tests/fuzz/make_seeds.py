#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/), deterministically.

    .venv/bin/python tests/fuzz/make_seeds.py     (needs the gguf package, in the test venv)

The seeds are small valid inputs and near misses of each format, written here rather than copied
from anywhere: WebSocket frames and OpenAI bodies, GGUF files (every metadata value type, a few
tensors, a tokenizer's metadata), safetensors files, texts for the tokenizers, conversations and
Jinja-like sources for the chat templates, and raw HTTP requests. The files are committed; rerun
this after changing it.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def protocol():
    frames = {
        "generate": {"type": "generate", "id": "r1", "prompt": "Hello", "max_tokens": 8},
        "generate_all": {"type": "generate", "id": "r2", "prompt": "The capital of France is",
                         "max_tokens": 16, "temperature": 0.7, "top_k": 40, "top_p": 0.9,
                         "min_p": 0.05, "repetition_penalty": 1.1, "seed": 42,
                         "stop": ["\n\n", "END"], "ignore_eos": True, "presence_penalty": 0.5,
                         "frequency_penalty": -0.5, "n": 3, "logprobs": 2, "timeout_ms": 5000},
        "chat": {"type": "generate", "id": "c1", "messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9\u4e2d"},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}]},
        "cancel": {"type": "cancel", "id": "r1"},
        "ping": {"type": "ping"},
        "oa_chat": {"model": "m", "messages": [{"role": "developer", "content": "x"},
                    {"role": "user", "content": [{"type": "text", "text": "a"}]}],
                    "max_completion_tokens": 20, "stream": True,
                    "stream_options": {"include_usage": True}, "logprobs": True,
                    "top_logprobs": 3, "n": 2, "seed": -1, "stop": "STOP"},
        "oa_completion": {"model": "m", "prompt": ["Once upon"], "max_tokens": 5, "logprobs": 2,
                          "echo": False, "best_of": 1, "temperature": 0, "top_p": 0,
                          "response_format": {"type": "text"}, "tools": []},
    }
    for name, obj in frames.items():
        write("protocol_fuzz", name + ".json", json.dumps(obj, ensure_ascii=False))
    write("protocol_fuzz", "dup_key.json", '{"type":"generate","id":"a","id":"b","prompt":"x"}')
    write("protocol_fuzz", "deep.json", "[" * 40 + "]" * 40)
    write("protocol_fuzz", "escapes.json",
          '{"type":"generate","id":"\\u00e9\\ud83d\\ude00","prompt":"\\n\\t\\"\\\\","seed":18446744073709551615}')
    write("protocol_fuzz", "numbers.json",
          '{"type":"generate","id":"n","prompt":"x","max_tokens":1e2,"temperature":-0.0,"top_p":1E-310}')


def gguf_file(path, arch="llama", with_tokenizer=True, tensors=True):
    w = gguf.GGUFWriter(path, arch)
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo")
    w.add_array("t.arr", [1, 2, 3])
    w.add_array("t.strs", ["a", "bc"])
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    if with_tokenizer:
        tokens = ["<unk>", "<s>", "</s>"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["ab", " "]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
        w.add_token_merges(["a b"])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}")
    if tensors:
        rng = np.random.default_rng(1)
        w.add_tensor("token_embd.weight", rng.standard_normal((31, 8)).astype(np.float32))
        w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float16))
        q = gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32),
                                 gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape,
                     raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_seeds():
    tmp = os.path.join(OUT, "..", "tmp-seed.gguf")
    for name, kw in {"full": {}, "no_tokenizer": {"with_tokenizer": False},
                     "no_tensors": {"tensors": False}, "qwen2": {"arch": "qwen2"}}.items():
        gguf_file(tmp, **kw)
        with open(tmp, "rb") as f:
            data = f.read()
        write("gguf_fuzz", name + ".gguf", data)
        if name == "full":
            write("gguf_fuzz", "truncated.gguf", data[: len(data) // 2])
            v2 = bytearray(data)
            v2[4:8] = struct.pack("<I", 2)
            write("gguf_fuzz", "version2.gguf", bytes(v2))
    os.remove(tmp)
    write("gguf_fuzz", "magic_only.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))


def safetensors(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    a = np.arange(6, dtype=np.float32).tobytes()
    b = np.ones(4, dtype=np.float16).tobytes()
    write("safetensors_fuzz", "two.safetensors", safetensors({
        "__metadata__": {"format": "pt"},
        "model.layers.0.mlp.up_proj.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "model.norm.weight": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]}}, a + b))
    write("safetensors_fuzz", "bf16.safetensors", safetensors({
        "x": {"dtype": "BF16", "shape": [1, 2, 2], "data_offsets": [0, 8]}}, b"\0" * 8))
    write("safetensors_fuzz", "empty.safetensors", safetensors({}))
    write("safetensors_fuzz", "overlap.safetensors", safetensors({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))


def tokenizer_seeds():
    texts = ["Hello, world!", " leading space and  double  spaces", "\u00e9t\u00e9 \u4e2d\u6587 \U0001F600 ok",
             "def f(x):\n\treturn x**2  # code\n", "<s>[INST] hi [/INST]</s><|endoftext|><|im_start|>",
             "123456789 3.14 1,000,000", "'s 're 've 'll 'd n't", "\r\n\r\n   \t\x00\x7f", "\xff\xfe bad"]
    for v in range(4):
        for i, t in enumerate(texts):
            data = t.encode("utf-8", "surrogateescape") if "\xff" not in t else b"\xff\xfe bad"
            write("tokenizer_fuzz", f"text{v}_{i}", bytes([v]) + data)
        ids = struct.pack("<8i", 1, 2, 100, 1000, 5, 0, 42, 7)
        write("tokenizer_fuzz", f"ids{v}", bytes([0x80 | v]) + ids)
    # Pre-tokenizer mode (first byte 0x40-0x7f picks one of the known pre-tokenizers).
    split = [b"Hello, world! It's 2026 -- 3.14 and \xe4\xb8\xad\xe6\x96\x87 ok\n\n  x",
             b"def f(x):\n\treturn x**2", b"'s 're 've   \xf0\x9f\x98\x80\r\n"]
    for n in range(4):
        for i, t in enumerate(split):
            write("tokenizer_fuzz", f"pretok{n}_{i}", bytes([0x40 + n * 7]) + t)


def chat_seeds():
    def conv(*msgs):
        return b"\0".join(bytes([r]) + c.encode() for r, c in msgs)
    convs = [conv((1, "Hi")), conv((0, "Be brief."), (1, "Hi"), (2, "Hello"), (1, "Again")),
             conv((1, "a"), (1, "b")), conv((3, "tool?")), conv((2, "first assistant")),
             conv((0, "  spaces  "), (1, "\u00e9\n\n"))]
    for fam in range(8):
        for i, c in enumerate(convs):
            write("chat_template_fuzz", f"f{fam}_{i}", bytes([fam]) + c)
    jinja = ["{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}",
             "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}",
             "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}",
             "{% for m in messages %}<|user|>\n{{ m['content'] }}<|end|>\n{% endfor %}<|assistant|>",
             "plain text"]
    for i, j in enumerate(jinja):
        write("chat_template_fuzz", f"jinja{i}", b"\xff" + j.encode())


def http_seeds():
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    reqs = {
        "get_root": "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
        "health_head": "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "metrics_key": "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fuzz-key\r\n\r\n",
        "models": "GET /v1/models?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: bearer fuzz-key\r\nOrigin: http://allowed.example\r\n\r\n",
        "chat": f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fuzz-key\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}",
        "chunked": "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fuzz-key\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n0\r\n\r\n",
        "preflight": "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: localhost:8080\r\nOrigin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, x-stainless-os\r\n\r\n",
        "upgrade": "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: rz, rz-key.fuzz-key\r\n\r\n",
        "pipelined": "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\nDELETE / HTTP/1.1\r\nHost: x\r\n\r\n",
        "foreign_origin": "POST /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\nContent-Length: 2\r\n\r\n{}",
    }
    for name, r in reqs.items():
        write("http_fuzz", name, r)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    protocol()
    gguf_seeds()
    safetensors_seeds()
    tokenizer_seeds()
    chat_seeds()
    http_seeds()
    n = sum(len(fs) for _, _, fs in os.walk(OUT))
    print(f"make_seeds: {n} files in {OUT}")


if __name__ == "__main__":
    sys.exit(main())
