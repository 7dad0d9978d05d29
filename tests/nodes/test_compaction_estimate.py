"""The running token estimate used by compaction equals the whole-list estimate exactly."""

from __future__ import annotations

import json
import random

from nodes.compaction import _index_message, _Sizes, compact, estimate_tokens


def _conversation(rng: random.Random, exchanges: int) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "task ✓ " * rng.randint(1, 30)}]
    for n in range(exchanges):
        call_id = f"call_{n}"
        messages.append({"role": "assistant", "content": "thinking é" * rng.randint(0, 60),
                         "tool_calls": [{"id": call_id, "type": "function", "function": {
                             "name": "read_file",
                             "arguments": json.dumps({"path": f"docs/{n}.txt"})}}]})
        body = {"evidence": [f"docs/{n}.txt#L1-L{rng.randint(1, 9)}"],
                "text": "line ü\n" * rng.randint(1, 400)}
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(body)})
    return messages


def test_running_estimate_equals_whole_list_estimate_with_skips_and_an_added_item() -> None:
    rng = random.Random(7)
    for _ in range(200):
        messages = _conversation(rng, rng.randint(0, 12))
        sizes = _Sizes(messages)
        assert sizes.tokens() == estimate_tokens(messages)
        skip = {i for i in range(len(messages)) if rng.random() < 0.4}
        kept = [m for i, m in enumerate(messages) if i not in skip]
        assert sizes.tokens(skip) == estimate_tokens(kept)
        index = _index_message([f"e{i}" for i in range(rng.randint(1, 50))])
        assert index is not None
        with_index = [*kept[:1], index, *kept[1:]]
        assert sizes.tokens(skip, sizes.length(index)) == estimate_tokens(with_index)


def test_compacted_conversation_fits_its_limit_whenever_the_protected_part_does() -> None:
    rng = random.Random(11)
    for _ in range(60):
        messages = _conversation(rng, rng.randint(2, 15))
        limit = rng.randint(300, 8000)
        out = compact(messages, limit)
        protected = estimate_tokens([messages[0], *messages[-2:]])
        if protected + 400 <= limit:  # room for the task, the last exchange and an index
            assert estimate_tokens(out) <= limit
        assert out[0] == messages[0] and out[-2:] == messages[-2:]
