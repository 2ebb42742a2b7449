"""Seal ESP packets with scapy (an independent implementation); write pcap + keys.yaml.

Made once, in a throwaway venv (scapy is not a dependency of espforensics):

    python3 -m venv /tmp/sv && /tmp/sv/bin/pip install scapy cryptography
    /tmp/sv/bin/python tests/data/scapy/make_aeads.py tests/data/scapy

scapy 2.8.0 sealed aeads.pcap with random keys (test keys, in
aeads.keys.yaml); tests/crypto/test_crypto.py checks that espforensics opens every
packet. The tests do not run this script.
"""

import os
import sys

from scapy.all import IP, UDP, Ether, Raw, wrpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

CASES = (  # (spi, scapy's name, the kernel's name, key bytes with salt, ICV bits, ESN)
    (0x9001, "AES-NULL-GMAC", "rfc4543(gcm(aes))", 16 + 4, 128, False),
    (0x9002, "AES-NULL-GMAC", "rfc4543(gcm(aes))", 32 + 4, 128, True),
    (0x9003, "AES-CCM", "rfc4309(ccm(aes))", 16 + 3, 128, False),
    (0x9004, "AES-CCM", "rfc4309(ccm(aes))", 24 + 3, 128, True),
    (0x9005, "CHACHA20-POLY1305", "rfc7539esp(chacha20,poly1305)", 32 + 4, 128, False),
    (0x9006, "CHACHA20-POLY1305", "rfc7539esp(chacha20,poly1305)", 32 + 4, 128, True),
    (0x9007, "AES-GCM", "rfc4106(gcm(aes))", 16 + 4, 128, True),
)


def main(out: str) -> None:
    frames, yaml = [], ["sas:"]
    for spi, algo, name, key_len, icv, esn in CASES:
        key = os.urandom(key_len)
        sa = SecurityAssociation(
            ESP, spi=spi, crypt_algo=algo, crypt_key=key, auth_algo="NULL", esn_en=esn, esn=int(esn)
        )
        for seq in range(1, 6):
            inner = IP(src="198.51.100.1", dst="198.51.100.2") / UDP(sport=1000 + seq, dport=2000)
            sa.seq_num = seq
            sealed = sa.encrypt(inner / Raw(b"x" * (20 + 7 * seq)))
            frames.append(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / sealed)
        yaml += [f"- spi: {spi:#x}", f"  aead: {name}", f"  key: 0x{key.hex()}", f"  icv: {icv}"]
        yaml += ["  src: 198.51.100.1", "  dst: 198.51.100.2"]
        yaml += ["  esn: true", "  esn_hi: 1"] if esn else []
    wrpcap(os.path.join(out, "aeads.pcap"), frames)
    with open(os.path.join(out, "aeads.keys.yaml"), "w") as fh:
        fh.write("\n".join(yaml) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
