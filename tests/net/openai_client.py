"""The OpenAI-compatible API of a running `rz serve`, through the official `openai` package.

Usage: openai_client.py BASE_URL EXPECTED_CHAT_TEXT
  BASE_URL            http://127.0.0.1:PORT/v1
  EXPECTED_CHAT_TEXT  `rz generate --chat` 's greedy answer to QUESTION (20 tokens), the reference

Run by tests/net/serve_cli_test.cpp. Checks chat and completions, whole and streamed, stop
strings, n seeded choices, logprobs, penalties, usage (with cached prompt tokens), the model list and the error cases;
prints one line per check and exits non-zero at the first failure.
"""
import sys

import openai

QUESTION = "What is the capital of France?"


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + (": " + str(detail) if detail and not cond else ""))
    if not cond:
        sys.exit(1)


def main():
    base, expected = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": QUESTION}]

    models = client.models.list().data
    check("models.list has the served model", len(models) == 1 and models[0].id, models)
    model = models[0].id
    got = client.models.retrieve(model)
    check("models.retrieve the served model", got.id == model and got.object == "model", got)
    try:
        client.models.retrieve("no-such/model")
        check("models.retrieve another model is a 404", False)
    except openai.NotFoundError as e:
        check("models.retrieve another model is a 404", e.code == "model_not_found", e)

    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=20, temperature=0)
    check("chat greedy equals rz generate", r.choices[0].message.content == expected,
          repr(r.choices[0].message.content))
    check("chat object", r.object == "chat.completion" and r.id.startswith("chatcmpl-"), r)
    check("chat role", r.choices[0].message.role == "assistant")
    check("chat usage", r.usage.prompt_tokens > 0 and
          r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage)
    check("chat finish_reason", r.choices[0].finish_reason in ("stop", "length"), r)

    parts, finish, usage = [], None, None
    stream = client.chat.completions.create(model=model, messages=msgs, max_tokens=20,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    check("chat stream equals the whole answer", "".join(parts) == expected, repr("".join(parts)))
    check("chat stream finish_reason", finish == r.choices[0].finish_reason, finish)
    check("chat stream usage", usage is not None and
          usage.completion_tokens == r.usage.completion_tokens, usage)

    # The same conversation again: its prompt's full KV blocks come from the prefix cache.
    long_msgs = [{"role": "system", "content": "You list fruit. " * 30}] + msgs
    client.chat.completions.create(model=model, messages=long_msgs, max_tokens=2)
    again = client.chat.completions.create(model=model, messages=long_msgs, max_tokens=2)
    details = again.usage.prompt_tokens_details
    check("cached_tokens covers the repeated prompt",
          details is not None and details.cached_tokens >= again.usage.prompt_tokens - 32 and
          details.cached_tokens > 0, again.usage)

    c = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8,
                                  temperature=0)
    check("completions", c.object == "text_completion" and len(c.choices) == 1 and
          c.choices[0].text, c)
    text = "".join(x.choices[0].text for x in client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True)
        if x.choices)
    check("completions stream equals the whole text", text == c.choices[0].text, repr(text))
    # OpenAI's other prompt forms: several prompts (choices in order), token ids.
    several = client.completions.create(model=model, prompt=["The capital of France is", "Paris"],
                                        max_tokens=8, temperature=0)
    check("several prompts", len(several.choices) == 2 and
          [x.index for x in several.choices] == [0, 1] and
          several.choices[0].text == c.choices[0].text and
          several.usage.prompt_tokens > c.usage.prompt_tokens, several)
    ids = client.completions.create(model=model, prompt=[[1, 2, 3], [4, 5]], max_tokens=2,
                                    temperature=0)
    check("token-id prompts", len(ids.choices) == 2 and ids.usage.prompt_tokens == 5, ids)
    # A stop string taken from the greedy text: the answer ends before it, finish_reason stop.
    cut = c.choices[0].text.strip().split(" ")[0]
    if cut:
        s = client.completions.create(model=model, prompt="The capital of France is",
                                      max_tokens=8, temperature=0, stop=[cut])
        check("stop string", s.choices[0].finish_reason == "stop" and cut not in s.choices[0].text,
              s.choices[0])

    n = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, n=3, seed=7,
                                       temperature=1.0)
    n2 = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, n=3, seed=7,
                                        temperature=1.0)
    check("n choices", [x.index for x in n.choices] == [0, 1, 2], n.choices)
    check("seeded choices are reproducible",
          [x.message.content for x in n.choices] == [x.message.content for x in n2.choices])

    # Log-probabilities: chat's content entries (token, logprob, bytes, top_logprobs best first)
    # and completions' tokens/token_logprobs/top_logprobs/text_offset, the same for the same
    # greedy tokens whole and streamed; greedy picks the most likely token.
    lp = client.chat.completions.create(model=model, messages=msgs, max_tokens=6, temperature=0,
                                        logprobs=True, top_logprobs=3)
    content = lp.choices[0].logprobs.content
    check("chat logprobs: one entry per token", len(content) == lp.usage.completion_tokens, content)
    check("chat logprobs: the entries spell the answer",
          b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace") ==
          lp.choices[0].message.content, content)
    check("chat logprobs: 3 alternatives, best first, the greedy pick first",
          all(len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token and
              abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 and
              e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
              and e.logprob <= 0 for e in content), content)
    streamed = []
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=6,
                                                temperature=0, logprobs=True, top_logprobs=3,
                                                stream=True):
        for c in chunk.choices:
            if c.logprobs and c.logprobs.content:
                streamed.extend(c.logprobs.content)
    check("chat logprobs streamed equal the whole response's",
          [(e.token, round(e.logprob, 4)) for e in streamed] ==
          [(e.token, round(e.logprob, 4)) for e in content], streamed)
    cl = client.completions.create(model=model, prompt="The capital of France is", max_tokens=5,
                                   temperature=0, logprobs=2)
    l = cl.choices[0].logprobs
    check("completions logprobs", len(l.tokens) == len(l.token_logprobs) == len(l.top_logprobs) ==
          len(l.text_offset) == cl.usage.completion_tokens and
          all(len(t) <= 2 for t in l.top_logprobs) and l.text_offset[0] == 0, l)
    plain = client.completions.create(model=model, prompt="The capital of France is",
                                      max_tokens=5, temperature=0)
    check("no logprobs asked: null", plain.choices[0].logprobs is None, plain.choices[0])

    # Penalties change greedy text that repeats itself; 0 changes nothing.
    rep = "one two one two one two one two"
    base_c = client.completions.create(model=model, prompt=rep, max_tokens=12, temperature=0)
    zero_c = client.completions.create(model=model, prompt=rep, max_tokens=12, temperature=0,
                                       presence_penalty=0, frequency_penalty=0)
    pen_c = client.completions.create(model=model, prompt=rep, max_tokens=12, temperature=0,
                                      presence_penalty=2, frequency_penalty=2)
    check("penalties 0 change nothing", zero_c.choices[0].text == base_c.choices[0].text)
    check("penalties change the greedy text", pen_c.choices[0].text != base_c.choices[0].text,
          (base_c.choices[0].text, pen_c.choices[0].text))

    # rz's timeout_ms extension (extra_body): a long generation ends with finish_reason "timeout"
    # and the text so far, or a 408 with code timeout if no token came in time.
    try:
        t = client.completions.create(model=model, prompt="Once upon a time", max_tokens=1000,
                                      temperature=0, extra_body={"timeout_ms": 300,
                                                                 "ignore_eos": True})
        check("timeout_ms ends the completion", t.choices[0].finish_reason == "timeout" and
              0 < t.usage.completion_tokens < 1000, (t.choices[0].finish_reason, t.usage))
    except openai.APIStatusError as e:
        check("timeout_ms before the first token: 408 timeout", e.status_code == 408 and
              e.body.get("code") == "timeout", e.body)

    try:
        client.completions.create(model=model, prompt="x", n=99)
        check("n=99 refused", False)
    except openai.BadRequestError as e:
        check("n=99 refused with 400 and param n", e.status_code == 400 and
              e.body.get("param") == "n", e.body)
    try:
        client.completions.create(model=model, prompt="word " * 900, max_tokens=1000)
        check("context overflow refused", False)
    except openai.BadRequestError as e:
        check("context overflow: code context_length_exceeded",
              e.body.get("code") == "context_length_exceeded", e.body)
    print("all checks passed")


if __name__ == "__main__":
    main()
