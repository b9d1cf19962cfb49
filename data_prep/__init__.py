"""Data preparation commons: the SFT schema and mix, decontamination, dedup, filters and manifests."""
