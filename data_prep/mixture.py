"""SFT mixture report in both views of the paper's Table 3: samples and loss tokens per category.

Writes ``mixture.md`` (with the paper's shares alongside for comparison) and ``mixture.png`` (two bar
charts, matplotlib's Agg backend). Loss tokens are template tokens of supervised turns when a tokenizer
was given; otherwise characters of supervised turns, and the report says which unit it used.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from data_prep.io import atomic_write_text
from data_prep.sources import CATEGORIES

# Table 3 (samples, loss tokens in billions) of the shipped mix.
PAPER_TABLE3 = {
    "General Agent": (3_568_388, 3.84),
    "General Chat": (1_599_070, 3.30),
    "STEM": (1_359_334, 2.37),
    "Math": (1_146_108, 7.96),
    "Code": (792_807, 4.25),
    "Coding Agent": (549_222, 5.32),
}


class MixtureAccumulator:
    """Counts samples and loss units per category as samples stream by."""

    def __init__(self, unit: str = "tokens") -> None:
        self.unit = unit
        self.samples: Counter[str] = Counter()
        self.loss: Counter[str] = Counter()

    def add(self, category: str, loss_units: int) -> None:
        """Count one sample."""
        self.samples[category] += 1
        self.loss[category] += loss_units

    def rows(self) -> list[dict]:
        """One row per category (Table 3 order, then any others) with counts and shares."""
        total_s, total_l = sum(self.samples.values()) or 1, sum(self.loss.values()) or 1
        paper_s = sum(s for s, _ in PAPER_TABLE3.values())
        paper_l = sum(t for _, t in PAPER_TABLE3.values())
        cats = [c for c in CATEGORIES if c in self.samples] + sorted(set(self.samples) - set(CATEGORIES))
        out = []
        for c in cats:
            ps, pl = PAPER_TABLE3.get(c, (0, 0.0))
            out.append(
                {
                    "category": c,
                    "samples": self.samples[c],
                    "sample_share": self.samples[c] / total_s,
                    "loss": self.loss[c],
                    "loss_share": self.loss[c] / total_l,
                    "paper_sample_share": ps / paper_s,
                    "paper_loss_share": pl / paper_l,
                }
            )
        return out

    def markdown(self) -> str:
        """The report as a markdown table."""
        unit = "loss tokens" if self.unit == "tokens" else f"loss {self.unit}"
        lines = [
            f"| category | samples | % samples | {unit} | % {unit} | paper % samples | paper % tokens |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows():
            lines.append(
                f"| {r['category']} | {r['samples']:,} | {100 * r['sample_share']:.1f}% | {r['loss']:,} | "
                f"{100 * r['loss_share']:.1f}% | {100 * r['paper_sample_share']:.1f}% | "
                f"{100 * r['paper_loss_share']:.1f}% |"
            )
        lines.append(
            f"| Total | {sum(self.samples.values()):,} | 100% | {sum(self.loss.values()):,} | 100% | | |"
        )
        return "\n".join(lines) + "\n"

    def plot(self, path: str | Path) -> None:
        """Save the two share charts (samples, loss) as a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = self.rows()
        names = [r["category"] for r in rows]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, title in (
            (axes[0], "sample_share", "Samples"),
            (axes[1], "loss_share", f"Loss {self.unit}"),
        ):
            ax.barh(names, [100 * r[key] for r in rows], color="tab:blue")
            ax.set_title(f"{title} share (%)")
            ax.invert_yaxis()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``mixture.md`` and ``mixture.png`` into ``out_dir``."""
        out_dir = Path(out_dir)
        md, png = out_dir / "mixture.md", out_dir / "mixture.png"
        atomic_write_text(md, "# SFT mixture by capability category\n\n" + self.markdown())
        self.plot(png)
        return {"mixture.md": md, "mixture.png": png}
