"""What the make_*.py scripts here share: writing a capture and its keys.yaml side by side."""

import os


def save(out: str, stem: str, frames: list[object], yaml: list[str]) -> None:
    """``out/STEM.pcap`` (scapy's wrpcap) and ``out/STEM.keys.yaml`` (``yaml``, one line each)."""
    from scapy.all import wrpcap

    wrpcap(os.path.join(out, f"{stem}.pcap"), frames)
    with open(os.path.join(out, f"{stem}.keys.yaml"), "w") as fh:
        fh.write("\n".join(["sas:", *yaml]) + "\n")
