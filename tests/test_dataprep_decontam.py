"""Decontamination: planted phrases, paraphrase near-misses, short items, chain order, engines, CLI."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from data_prep.benchmarks import BenchmarkItem, load_benchmark
from data_prep.cli import decontam_app
from data_prep.decontaminate import build_index, item_phrases, iter_scan, normalize, scan_texts

FIX = Path(__file__).parent / "fixtures" / "dataprep"
rng = random.Random(0)
VOCAB = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(3000)]


def _text(n: int, seed: int) -> str:
    r = random.Random(seed)
    return " ".join(r.choices(VOCAB, k=n))


ITEMS = [BenchmarkItem(f"q{i}", _text(80, i)) for i in range(30)]


def test_phrase_sampling_is_evenly_spaced_and_exhaustive_takes_all():
    words = normalize(ITEMS[0].text).split()
    sampled = item_phrases(ITEMS[0].text)
    assert len(sampled) == 20
    assert (
        sampled[0] == b" " + b" ".join(words[:8]) + b" "
        and sampled[-1] == b" " + b" ".join(words[-8:]) + b" "
    )
    assert len(item_phrases(ITEMS[0].text, exhaustive=True)) == 73


def test_planted_copy_is_removed_and_paraphrase_near_miss_kept():
    index = build_index([("ifeval", ITEMS, False)])
    item = ITEMS[7].text.split()
    planted = "Here is my task:\n" + " ".join(item[:50]).upper().replace(" ", ",  ") + "\nthanks"
    # A near-miss: every 6th word changed, so no 8-word phrase survives intact.
    paraphrase = " ".join(w if i % 6 else "changed" for i, w in enumerate(item))
    partial = " ".join(item[:20])  # under half of the phrases
    results = scan_texts(index, [planted, paraphrase, partial, _text(400, 99)])
    assert results[0] is not None and results[0].benchmark == "ifeval" and results[0].item_id == "q7"
    assert results[0].hits >= 10
    assert results[1:] == [None, None, None]


def test_short_items_rule():
    short = [BenchmarkItem("s5", "Write a haiku about autumn."), BenchmarkItem("s2", "Hello world")]
    index = build_index([("ifeval", short, False)])
    assert index.skipped_short["ifeval"] == 1  # two words: too generic to screen
    results = scan_texts(
        index, ["please write a haiku about autumn!", "hello world", "write a haiku about spring"]
    )
    assert results[0] is not None and results[0].item_id == "s5" and results[1:] == [None, None]


def test_drop_shared_ignores_template_phrases_of_generated_sets_but_catches_copies():
    bits = "How many 1 bits are there in the binary representation of the number {}?"
    held = [BenchmarkItem(f"b{n}", bits.format(n)) for n in (3, 5, 6, 6)]  # b6 twice: a copy in the set
    other = [BenchmarkItem("g1", "Find the GCD of these numbers: 16, 2. Give only the GCD as your answer.")]
    sets = [("heldout:puzzle_acc", held, False), ("heldout:sft_format", other, False)]
    texts = [bits.format(11), bits.format(5), bits.format(6) + " It is 2.", other[0].text + " 2"]
    # The paper's rule: every task of the template shares 7 of the 8 phrases, so all are removed.
    assert all(m is not None for m in scan_texts(build_index(sets), texts[:3]))
    results = scan_texts(build_index(sets, drop_shared=True), texts)
    assert results[0] is None  # another number: a new task of the same template
    assert results[1] is not None and results[1].item_id == "b5"  # its own last phrase
    assert results[2] is not None and results[2].item_id == "b6"  # no own phrase left: the whole text
    assert results[3] is not None and results[3].item_id == "g1"  # nothing shared: the paper's phrases


def test_chain_order_charges_first_benchmark_and_engines_agree():
    shared = ITEMS[3]
    index = build_index(
        [("terminal-bench-2.0", [shared], False), ("ifeval", ITEMS, False), ("aime24", ITEMS[:5], True)]
    )
    texts = [shared.text, ITEMS[4].text, _text(300, 5), ITEMS[10].text[:200]]
    by_engine = {e: scan_texts(index, texts, e) for e in ("hash", "aho", "naive")}
    assert by_engine["hash"][0].benchmark == "terminal-bench-2.0"
    assert by_engine["hash"][1].benchmark == "ifeval"
    assert by_engine["hash"] == by_engine["aho"] == by_engine["naive"]


def test_near_copies_that_share_every_fingerprint_are_confirmed_byte_for_byte():
    """The hash reads five bytes and the length of each word: a copy with other inner letters hashes alike.

    Such a window is a candidate and must be rejected by the byte comparison, not removed.
    """
    long_words = [
        BenchmarkItem(f"L{i}", " ".join(w * 3 for w in _text(40, 700 + i).split())) for i in range(4)
    ]
    index = build_index([("ifeval", long_words, True)])

    def swap_inner(word: str) -> str:  # keep the sampled bytes (0, 1, middle, -2, -1), change the rest
        keep = {0, 1, len(word) // 2, len(word) - 2, len(word) - 1}
        return "".join(c if i in keep else ("q" if c != "q" else "z") for i, c in enumerate(word))

    near = " ".join(swap_inner(w) for w in long_words[2].text.split())
    assert near != long_words[2].text and normalize(near) != normalize(long_words[2].text)
    texts = [near, long_words[1].text, "  ".join(long_words[3].text.split())]
    by_engine = {e: scan_texts(index, texts, e) for e in ("hash", "aho", "naive")}
    assert by_engine["hash"][0] is None and by_engine["hash"][1].item_id == "L1"
    assert by_engine["hash"][2].item_id == "L3"
    assert by_engine["hash"] == by_engine["aho"] == by_engine["naive"]


def test_parallel_streaming_keeps_order_and_results():
    index = build_index([("ifeval", ITEMS, False)])
    texts = [ITEMS[i % 30].text if i % 7 == 0 else _text(200, 1000 + i) for i in range(60)]
    serial = list(iter_scan(enumerate(texts), index, workers=1, batch_bytes=2000))
    parallel = list(iter_scan(enumerate(texts), index, workers=2, batch_bytes=2000))
    assert serial == parallel and [p for p, _ in parallel] == list(range(60))
    assert sum(m is not None for _, m in parallel) == 9


def test_benchmark_loaders_read_public_formats(tmp_path):
    gpqa = tmp_path / "gpqa_diamond.csv"
    gpqa.write_text(
        "Record ID,Question,Correct Answer\nrec1,What is the spin of a photon in units of hbar?,1\n"
    )
    tau = tmp_path / "tasks.json"
    tau.write_text(
        json.dumps(
            [
                {
                    "id": "t1",
                    "user_scenario": {
                        "instructions": {
                            "reason_for_call": "You want to cancel order 42",
                            "known_info": "Your name is Ann",
                        }
                    },
                }
            ]
        )
    )
    tb = tmp_path / "tb"
    (tb / "fix-git").mkdir(parents=True)
    (tb / "fix-git" / "instruction.md").write_text("Recover the lost commit in /app.")
    swe = tmp_path / "swe.jsonl"
    swe.write_text(
        json.dumps({"instance_id": "a__b-1", "problem_statement": "Crash on empty input"}) + "\n{bad\n"
    )
    assert load_benchmark("gpqa-diamond", gpqa) == [
        BenchmarkItem("rec1", "What is the spin of a photon in units of hbar?")
    ]
    assert "cancel order 42" in load_benchmark("tau2-bench", tau)[0].text
    assert load_benchmark("terminal-bench-2.0", tb)[0].id == "fix-git"
    assert load_benchmark("swe-bench-verified", swe)[0].id == "a__b-1"
    assert [i.id for i in load_benchmark("ifeval", FIX / "ifeval_input_data.jsonl")] == [
        "1000",
        "1001",
        "1002",
    ]
    with pytest.raises(KeyError, match="unknown benchmark"):
        load_benchmark("mmlu", swe)


def _corpus(tmp_path: Path) -> Path:
    ifeval = json.loads((FIX / "ifeval_input_data.jsonl").read_text().splitlines()[0])["prompt"]
    aime = json.loads((FIX / "aime.jsonl").read_text())["problem"]
    rows = [
        {
            "id": "leak-ifeval",
            "messages": [{"role": "user", "content": ifeval}, {"role": "assistant", "content": "ok"}],
        },
        {"id": "leak-aime", "messages": [{"role": "user", "content": "Solve: " + aime}]},
        {"id": "clean", "messages": [{"role": "user", "content": "Summarise the history of the Colosseum."}]},
        {"id": "haiku", "messages": [{"role": "user", "content": "Write a haiku."}]},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "\n".join(json.dumps(r) for r in rows) + "\n{broken\n" + json.dumps({"messages": []}) + "\n"
    )
    return path


def test_cli_mounted_as_subcommand_writes_outputs(tmp_path):
    app = typer.Typer()
    app.add_typer(decontam_app, name="decontam")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "decontam",
            "--benchmark",
            f"ifeval={FIX / 'ifeval_input_data.jsonl'}",
            "--benchmark",
            f"aime24={FIX / 'aime.jsonl'}",
            "--corpus",
            str(_corpus(tmp_path)),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert sorted(report["removed_ids"]) == ["leak-aime", "leak-ifeval"]
    assert report["removed_per_benchmark"] == {"ifeval": 1, "aime24": 1}
    assert report["malformed"]["by_reason"] == {"invalid_json": 1, "missing_id": 1}
    kept = [json.loads(x)["id"] for x in (out / "kept.jsonl").read_text().splitlines()]
    assert kept == ["clean", "haiku"]
    removed = [json.loads(x) for x in (out / "removed.jsonl").read_text().splitlines()]
    assert removed[0]["decontam"]["item_id"] == "1000"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outputs"]["kept.jsonl"]["sha256"] and manifest["malformed"]["total"] == 2


def test_cli_rejects_unknown_benchmark(tmp_path):
    result = CliRunner().invoke(
        decontam_app,
        ["--benchmark", "mmlu=x.jsonl", "--corpus", str(_corpus(tmp_path)), "--out", str(tmp_path / "o")],
    )
    assert result.exit_code != 0 and "unknown benchmark" in result.output


def test_vectorised_phrase_hashes_and_slicing_match_the_plain_definitions():
    from data_prep.decontaminate import _phrase_hashes, phrase_hash, prepare

    r = random.Random(3)
    alphabet = b"ab  \x01\t\xc3\x84xyz"  # runs of spaces, one-byte words, non-ASCII bytes, other controls
    phrases = [bytes(r.choice(alphabet) for _ in range(r.randint(0, 60))) for _ in range(3000)]
    hashes, words = _phrase_hashes(phrases, chunk=700)
    assert hashes.tolist() == [phrase_hash(p) for p in phrases]
    assert words.tolist() == [len(p.split(b" ")) - p.split(b" ").count(b"") for p in phrases]
    # The hash reads words, not their spacing: the scan hashes windows of uncollapsed text.
    assert phrase_hash(b"  ab   c x ") == phrase_hash(b" ab c x ") != phrase_hash(b" ab c y ")
    for seed in range(40):  # item_phrases slices the joined text; the definition joins word lists
        text = _text(r.randint(1, 90), seed).replace("a", "Ä, ").replace("e", "\n\t")
        words = prepare(text).split()
        for exhaustive in (False, True):
            want = [b" " + b" ".join(words[s : s + 8]) + b" " for s in range(len(words) - 7)]
            if not exhaustive and len(want) > 20:
                picks = sorted({round(i * (len(want) - 1) / 19) for i in range(20)})
                want = [want[i] for i in picks]
            if len(words) < 8:
                want = [b" " + b" ".join(words) + b" "] if len(words) >= 5 else []
            assert item_phrases(text, exhaustive) == list(dict.fromkeys(want))


@pytest.mark.parametrize("chunk_bytes", [1, 37, 4096, 1 << 20])
def test_chunked_file_screen_matches_row_by_row_screen(tmp_path, monkeypatch, chunk_bytes):
    """decontaminate_file (chunks, a worker pool) screens exactly as read_jsonl + screen_rows do.

    Kept rows are their corpus lines as read (no line ending, no byte-order mark), removed rows the row
    re-serialised with its match.
    """
    from data_prep import decontam_pipeline as dp
    from data_prep.io import JsonlWriter, MalformedCounter, read_jsonl

    lines = [b"\xef\xbb\xbf" + json.dumps({"id": "bom", "prompt": ITEMS[1].text}).encode()]
    for i in range(80):
        text = ITEMS[i % 30].text if i % 5 == 0 else _text(60, 500 + i)
        row = {"id": i, "messages": [{"role": "user", "content": text.upper() + " caf\u00e9 \x7f"}]}
        lines.append(json.dumps(row, ensure_ascii=i % 2 == 0).encode() + (b"\r" if i % 9 == 0 else b""))
    lines += [b"", b"  ", b"{oops", b'{"id": "u", "prompt": "bad \\ud800"}', b"\xff\xfe", b"[1]"]
    lines += [b'{"id": "", "prompt": "x"}', b'{"id": "t"}', b'{"id": "cut", "prompt": "unterminated']
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"\n".join(lines))  # the last line has no newline
    loaded = [("ifeval", ITEMS, False)]
    index = build_index(loaded)
    ref_report, ref_bad = dp.new_report(index, loaded), MalformedCounter()
    raw_line = {json.loads(x.removeprefix(b"\xef\xbb\xbf"))["id"]: x for x in lines[:81]}
    ref_kept = b""
    with JsonlWriter(tmp_path / "ref_rm.jsonl") as rm:
        for row, match in dp.screen_rows(read_jsonl(corpus, ref_bad), index, ref_report, ref_bad):
            if match is None:
                ref_kept += raw_line[row["id"]].removeprefix(b"\xef\xbb\xbf").rstrip(b"\r") + b"\n"
                assert json.loads(raw_line[row["id"]]) == row
            else:
                info = {"benchmark": match.benchmark, "item_id": match.item_id}
                rm.write({**row, "decontam": {**info, "phrase_hits": match.hits, "phrases": match.phrases}})
    monkeypatch.setattr(dp, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(dp, "load_benchmarks", lambda *a, **k: loaded)
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        report, bad, _ = dp.decontaminate_file(corpus, {"ifeval": "unused"}, out, workers=workers)
        assert (out / "kept.jsonl").read_bytes() == ref_kept
        assert (out / "removed.jsonl").read_bytes() == (tmp_path / "ref_rm.jsonl").read_bytes()
        assert report.as_dict() == ref_report.as_dict() and bad.as_dict() == ref_bad.as_dict()
        assert sorted(p.name for p in out.iterdir()) == ["kept.jsonl", "removed.jsonl"]  # no spilled parts
    assert ref_report.removed_ids[:2] == ["bom", "0"] and len(ref_report.removed_ids) == 17
    assert ref_bad.counts == {
        "invalid_json": 2,
        "invalid_unicode": 1,
        "not_utf8": 1,
        "not_an_object": 1,
        "missing_id": 1,
        "no_text": 1,
    }
