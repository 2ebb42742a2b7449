"""Seal ESP packets with scapy's ciphers and MACs; write algos.pcap + algos.keys.yaml.

The algorithms of issue 20 that scapy has (an independent implementation of
RFC 4303 and of each transform's ESP use): DES-CBC, CAST5-CBC (a 40-bit and
a 128-bit key), Blowfish-CBC, AES-CMAC-96, and ESP without integrity (scapy's
auth "NULL") with 3DES-CBC, AES-CBC, AES-CTR and the NULL cipher. Made once,
in a throwaway venv (scapy is not a dependency of espforensics):

    python3 -m venv /tmp/sv && /tmp/sv/bin/pip install scapy cryptography
    /tmp/sv/bin/python tests/data/scapy/make_algos.py tests/data/scapy

scapy 2.8.0 sealed algos.pcap with random keys (test keys, in
algos.keys.yaml); tests/crypto/test_algorithms_issue20.py checks every packet's
verdict, its decrypted inner ports, and tshark's reading of the same
capture. The tests do not run this script.
"""

import os
import sys

from scapy.all import IP, UDP, Ether, Raw, wrpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

CASES = (  # (spi, scapy cipher, kernel cipher, key bytes, scapy auth, kernel auth, key bytes)
    (0xA001, "DES", "cbc(des)", 8, "HMAC-SHA1-96", "hmac(sha1)", 20),
    (0xA002, "CAST", "cbc(cast5)", 16, "HMAC-MD5-96", "hmac(md5)", 16),
    (0xA003, "CAST", "cbc(cast5)", 5, "HMAC-SHA1-96", "hmac(sha1)", 20),
    (0xA004, "Blowfish", "cbc(blowfish)", 16, "SHA2-256-128", "hmac(sha256)", 32),
    (0xA005, "AES-CBC", "cbc(aes)", 16, "AES-CMAC-96", "cmac(aes)", 16),
    (0xA006, "3DES", "cbc(des3_ede)", 24, "NULL", None, 0),
    (0xA007, "AES-CBC", "cbc(aes)", 16, "NULL", None, 0),
    (0xA008, "AES-CTR", "rfc3686(ctr(aes))", 20, "NULL", None, 0),
    (0xA009, "NULL", "ecb(cipher_null)", 0, "NULL", None, 0),
)
ICV_BITS = {"hmac(sha1)": 96, "hmac(md5)": 96, "hmac(sha256)": 128, "cmac(aes)": 96}


def main(out: str) -> None:
    frames, yaml = [], ["sas:"]
    for spi, algo, name, key_len, auth, auth_name, auth_len in CASES:
        key, auth_key = os.urandom(key_len), os.urandom(auth_len)
        sa = SecurityAssociation(
            ESP, spi=spi, crypt_algo=algo, crypt_key=key, auth_algo=auth, auth_key=auth_key
        )
        for seq in range(1, 6):
            inner = IP(src="198.51.100.1", dst="198.51.100.2") / UDP(sport=1000 + seq, dport=2000)
            sa.seq_num = seq
            sealed = sa.encrypt(inner / Raw(b"x" * (20 + 7 * seq)))
            frames.append(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / sealed)
        yaml += [f"- spi: {spi:#x}", f"  enc: {name}", f"  key: 0x{key.hex()}"]
        if auth_name is not None:
            yaml += [f"  auth: {auth_name}", f"  auth_key: 0x{auth_key.hex()}"]
            yaml += [f"  icv: {ICV_BITS[auth_name]}"]
        yaml += ["  src: 198.51.100.1", "  dst: 198.51.100.2"]
    wrpcap(os.path.join(out, "algos.pcap"), frames)
    with open(os.path.join(out, "algos.keys.yaml"), "w") as fh:
        fh.write("\n".join(yaml) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
