"""A tiny real agent process for the fault tests: N chat turns through the `openai` SDK at
OPENAI_BASE_URL (no retries), printing one line per call: `ok <text>` or `lost <error type>`."""

from __future__ import annotations

import os
import sys

import openai


def main() -> int:
    client = openai.OpenAI(max_retries=0, timeout=30)  # OPENAI_BASE_URL / OPENAI_API_KEY
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    for _ in range(int(os.environ.get("TURNS", "3"))):
        try:
            m = client.chat.completions.create(model="m-test", messages=messages)  # type: ignore[arg-type]
        except openai.APIConnectionError as exc:
            print(f"lost {type(exc).__name__}", flush=True)
            continue
        text = m.choices[0].message.content or ""
        print(f"ok {text}", flush=True)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "next"}]
    return 0


if __name__ == "__main__":
    sys.exit(main())
