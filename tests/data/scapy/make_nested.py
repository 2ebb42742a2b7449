"""Seal ESP inside ESP, and IPComp inside ESP, with scapy; write nested.pcap + nested.keys.yaml.

scapy's ipsec layer (an independent implementation of RFC 4303) seals
every ESP layer; scapy has no IPComp layer, so its header (RFC 3173 s2.2:
next header, flags, CPI) and raw DEFLATE data (RFC 2394: zlib, wbits -15)
are built here by hand. Made once, in a throwaway venv (scapy is not a
dependency of espforensics):

    python3 -m venv /tmp/sv && /tmp/sv/bin/pip install scapy cryptography
    /tmp/sv/bin/python tests/data/scapy/make_nested.py tests/data/scapy

Frames (tests/decode/test_nested.py asserts each layer's row):
  1-4  SA 0xB001 (tunnel 192.0.2.1 -> 192.0.2.2, AES-CBC + HMAC-SHA1-96), seq 1-4,
       each carrying SA 0xB002 (tunnel 203.0.113.1 -> 203.0.113.2, AES-CBC +
       HMAC-SHA2-256-128) carrying TCP 10.1.0.1:4000+n -> 10.2.0.1:80; the inner
       SA's seq is 1, 2, 2, 3 (frame 3 repeats seq 2: a duplicate only the inner
       layer shows).
  5-6  SA 0xB003 (transport 192.0.2.1 -> 192.0.2.2, AES-CBC + HMAC-SHA1-96), next
       header 50: SA 0xB004 (transport, same addresses, 3DES-CBC + HMAC-SHA1-96)
       carrying ICMP echo id 7.
  7    SA 0xB005 (transport 192.0.2.1 -> 192.0.2.2, AES-CBC + HMAC-SHA1-96), next
       header 108: IPComp CPI 2 (DEFLATE), next header 4, an IPv4 UDP packet
       10.1.0.1:5353 -> 10.2.0.1:53 with 400 bytes of repeated data.
  8    SA 0xB005 seq 2: IPComp whose data inflates to 100,000 zero bytes (a zip bomb).
  9    SA 0xB005 seq 3: IPComp with negotiated CPI 0x4242, DEFLATE data, UDP inside.
"""

import os
import sys
import zlib

from scapy.all import ICMP, IP, TCP, UDP, Ether, Raw, wrpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

GW = ("192.0.2.1", "192.0.2.2")
MID = ("203.0.113.1", "203.0.113.2")
HOSTS = ("10.1.0.1", "10.2.0.1")
KERNEL = {
    "AES-CBC": "cbc(aes)",
    "3DES": "cbc(des3_ede)",
    "HMAC-SHA1-96": ("hmac(sha1)", 20, 96),
    "SHA2-256-128": ("hmac(sha256)", 32, 128),
}
KEY_LEN = {"AES-CBC": 16, "3DES": 24}


def _sa(spi, algo, auth, tunnel, yaml, ends):
    key = os.urandom(KEY_LEN[algo])
    auth_name, auth_len, icv = KERNEL[auth]
    auth_key = os.urandom(auth_len)
    header = IP(src=ends[0], dst=ends[1]) if tunnel else None
    sa = SecurityAssociation(
        ESP,
        spi=spi,
        crypt_algo=algo,
        crypt_key=key,
        auth_algo=auth,
        auth_key=auth_key,
        tunnel_header=header,
    )
    yaml += [f"- spi: {spi:#x}", f"  enc: {KERNEL[algo]}", f"  key: 0x{key.hex()}"]
    yaml += [f"  auth: {auth_name}", f"  auth_key: 0x{auth_key.hex()}", f"  icv: {icv}"]
    yaml += [f"  src: {ends[0]}", f"  dst: {ends[1]}"]
    return sa


def _seal(sa, seq, pkt):
    sa.seq_num = seq
    return sa.encrypt(pkt)


def _ipcomp(inner: bytes, cpi: int, nh: int = 4) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    return bytes([nh, 0]) + cpi.to_bytes(2, "big") + deflate.compress(inner) + deflate.flush()


def main(out: str) -> None:
    yaml = ["sas:"]
    a = _sa(0xB001, "AES-CBC", "HMAC-SHA1-96", True, yaml, GW)
    b = _sa(0xB002, "AES-CBC", "SHA2-256-128", True, yaml, MID)
    t = _sa(0xB003, "AES-CBC", "HMAC-SHA1-96", False, yaml, GW)
    d = _sa(0xB004, "3DES", "HMAC-SHA1-96", False, yaml, GW)
    p = _sa(0xB005, "AES-CBC", "HMAC-SHA1-96", False, yaml, GW)
    packets = []
    for n, inner_seq in enumerate((1, 2, 2, 3), start=1):
        tcp = IP(src=HOSTS[0], dst=HOSTS[1]) / TCP(sport=4000 + n, dport=80) / Raw(b"q" * 10 * n)
        packets.append(_seal(a, n, _seal(b, inner_seq, tcp)))
    for n in (1, 2):
        icmp = IP(src=GW[0], dst=GW[1]) / ICMP(id=7, seq=n) / Raw(b"p" * 24)
        packets.append(_seal(t, n, _seal(d, n, icmp)))
    udp = IP(src=HOSTS[0], dst=HOSTS[1]) / UDP(sport=5353, dport=53) / Raw(b"abcd" * 100)
    comp = [_ipcomp(bytes(udp), 2), _ipcomp(bytes(100_000), 2), _ipcomp(bytes(udp), 0x4242)]
    for n, payload in enumerate(comp, start=1):
        packets.append(_seal(p, n, IP(src=GW[0], dst=GW[1], proto=108) / Raw(payload)))
    frames = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / pkt for pkt in packets]
    wrpcap(os.path.join(out, "nested.pcap"), frames)
    with open(os.path.join(out, "nested.keys.yaml"), "w") as fh:
        fh.write("\n".join(yaml) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
