#!/usr/bin/env python3
"""Ask an rz server one question over its WebSocket and stream the answer to the terminal.

    python examples/chat_client.py [--url ws://127.0.0.1:8080/v1/ws] "What is the capital of France?"

Needs the `websockets` package (pip install websockets; scripts/setup.sh puts it in .venv).
The protocol is docs/protocol.md: one `generate` frame out, `token` frames back, then `done`.
"""
import argparse
import asyncio
import json
import sys

import websockets


async def ask(args) -> int:
    req = {"type": "generate", "id": "q1", "max_tokens": args.max_tokens,
           "temperature": args.temperature}
    if args.seed is not None:
        req["seed"] = args.seed
    if args.raw:
        req["prompt"] = args.question
    else:
        req["messages"] = [{"role": "user", "content": args.question}]
    async with websockets.connect(args.url, max_size=None) as ws:
        await ws.send(json.dumps(req))
        async for message in ws:
            frame = json.loads(message)
            if frame.get("id") != "q1":
                continue
            if frame["type"] == "token":
                sys.stdout.write(frame["text"])
                sys.stdout.flush()
            elif frame["type"] == "done":
                sys.stdout.write("\n")
                usage, timings = frame["usage"], frame["timings"]
                print(f"[{frame['finish_reason']}: {usage['completion_tokens']} tokens, "
                      f"first token {timings['ttft_ms']} ms, total {timings['total_ms']} ms]",
                      file=sys.stderr)
                return 0
            elif frame["type"] == "error":
                print(f"\nerror {frame['code']}: {frame['message']}", file=sys.stderr)
                return 1
    print("\nthe server closed the connection", file=sys.stderr)
    return 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("question")
    p.add_argument("--url", default="ws://127.0.0.1:8080/v1/ws")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int)
    p.add_argument("--raw", action="store_true",
                   help="send the question as a raw prompt instead of a chat message")
    args = p.parse_args()
    try:
        return asyncio.run(ask(args))
    except (OSError, websockets.exceptions.WebSocketException) as e:
        print(f"chat_client: {args.url}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
