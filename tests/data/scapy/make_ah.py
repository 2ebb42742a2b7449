"""Seal AH-then-ESP bundles (RFC 4301 s4.3) with scapy; write ah.pcap + ah.keys.yaml.

scapy's ipsec layer (an independent implementation of RFC 4302 and RFC 4303)
seals the ESP layer, then puts an AH in front of it. Only the ESP SAs are in
the key file: AH carries no key espforensics needs (its ICV covers what ESP's
already proves). Made once, in a throwaway venv (scapy is not a dependency
of espforensics):

    python3 -m venv /tmp/sv && /tmp/sv/bin/pip install scapy cryptography
    /tmp/sv/bin/python tests/data/scapy/make_ah.py tests/data/scapy

Frames (tests/e2e/test_ah.py asserts each row):
  1-3   IPv4 transport, AH SPI 0xA1 (HMAC-SHA1-96, 24 bytes), then ESP SPI 0xE1
        (AES-CBC + HMAC-SHA1-96) seq 1-3, UDP 1001-1003 -> 2000: ESP at 20 + 24.
  4-5   IPv6 transport, hop-by-hop options (8), AH SPI 0xA2 (HMAC-SHA2-256-128,
        28 bytes), then ESP SPI 0xE2 (AES-GCM-128 ICV, 20-byte key) seq 1-2,
        UDP 1001-1002 -> 2000: ESP at 40 + 8 + 28.
  6-9   IPv4 tunnel 198.51.100.1 -> 198.51.100.2, AH SPI 0xA3 (HMAC-SHA1-96),
        then ESP SPI 0xE3 (AES-CBC + HMAC-SHA2-256-128) seq 1-2, each datagram
        in two fragments (the second frame holds no AH): UDP 1001-1002 -> 2000.
  10-13 IPv6 transport as 4-5, SA 0xE2 seq 3-4, each in two IPv6 fragments
        (the Fragment header before AH, RFC 8200 s4.1).
"""

import os
import sys

from save import save
from scapy.all import IP, UDP, Ether, IPv6, IPv6ExtHdrHopByHop, Raw, fragment
from scapy.layers.ipsec import AH, ESP, SecurityAssociation

V4 = ("192.0.2.1", "192.0.2.2")
V6 = ("2001:db8::1", "2001:db8::2")
GW = ("198.51.100.1", "198.51.100.2")


def _udp(n: int, size: int = 20) -> UDP:
    return UDP(sport=1000 + n, dport=2000) / Raw(bytes([0x41 + n]) * size)


def _whole(packet: IP | IPv6) -> bytes:
    """The datagram's bytes: scapy 2.8's AH.encrypt leaves the ICV's length of stray bytes
    after the datagram's end, which a fragmenter would take for data."""
    raw = bytes(packet)
    if raw[0] >> 4 == 4:
        return raw[: int.from_bytes(raw[2:4], "big")]
    return raw[: 40 + int.from_bytes(raw[4:6], "big")]


def _fragments6(sealed: bytes, ident: int) -> list[IPv6]:
    """An IPv6 packet (40-byte header, 8-byte hop-by-hop, then AH) in two fragments: the
    Fragment header after hop-by-hop, AH and ESP its fragmentable part (RFC 8200 s4.5)."""
    head, hbh, rest = sealed[:40], bytearray(sealed[40:48]), sealed[48:]
    nxt, hbh[0] = hbh[0], 44
    cut = 512  # a multiple of 8
    out = []
    for off, chunk, more in ((0, rest[:cut], 1), (cut, rest[cut:], 0)):
        frag = bytes([nxt, 0]) + ((off | more).to_bytes(2, "big")) + ident.to_bytes(4, "big")
        body = bytes(hbh) + frag + chunk
        packet = bytearray(head)
        packet[4:6] = len(body).to_bytes(2, "big")
        out.append(IPv6(bytes(packet) + body))
    return out


def main(out: str) -> None:
    k1, a1 = os.urandom(16), os.urandom(20)
    k2 = os.urandom(20)
    k3, a3 = os.urandom(16), os.urandom(32)
    esp1 = SecurityAssociation(
        ESP,
        spi=0xE1,
        crypt_algo="AES-CBC",
        crypt_key=k1,
        auth_algo="HMAC-SHA1-96",
        auth_key=a1,
    )
    ah1 = SecurityAssociation(AH, spi=0xA1, auth_algo="HMAC-SHA1-96", auth_key=os.urandom(20))
    esp2 = SecurityAssociation(ESP, spi=0xE2, crypt_algo="AES-GCM", crypt_key=k2, auth_algo="NULL")
    ah2 = SecurityAssociation(AH, spi=0xA2, auth_algo="SHA2-256-128", auth_key=os.urandom(32))
    tunnel = IP(src=GW[0], dst=GW[1])
    esp3 = SecurityAssociation(
        ESP,
        spi=0xE3,
        crypt_algo="AES-CBC",
        crypt_key=k3,
        auth_algo="SHA2-256-128",
        auth_key=a3,
        tunnel_header=tunnel,
    )
    ah3 = SecurityAssociation(AH, spi=0xA3, auth_algo="HMAC-SHA1-96", auth_key=os.urandom(20))
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames = []
    for n in (1, 2, 3):
        esp1.seq_num = ah1.seq_num = n
        sealed = ah1.encrypt(esp1.encrypt(IP(src=V4[0], dst=V4[1]) / _udp(n)))
        frames.append(eth / IP(_whole(sealed)))
    for n in (1, 2):
        esp2.seq_num = ah2.seq_num = n
        packet = IPv6(src=V6[0], dst=V6[1]) / IPv6ExtHdrHopByHop() / _udp(n)
        frames.append(eth / IPv6(_whole(ah2.encrypt(esp2.encrypt(packet)))))
    for n in (1, 2):
        esp3.seq_num = ah3.seq_num = n
        sealed = IP(_whole(ah3.encrypt(esp3.encrypt(IP(src=V4[0], dst=V4[1]) / _udp(n, 600)))))
        sealed.id = 0x100 + n
        frames += [eth / f for f in fragment(sealed, fragsize=400)]
    for n in (3, 4):
        esp2.seq_num = ah2.seq_num = n
        packet = IPv6(src=V6[0], dst=V6[1]) / IPv6ExtHdrHopByHop() / _udp(n, 900)
        frames += [eth / f for f in _fragments6(_whole(ah2.encrypt(esp2.encrypt(packet))), n)]
    yaml = [
        f"- spi: 0xe1\n  enc: cbc(aes)\n  key: 0x{k1.hex()}\n  auth: hmac(sha1)",
        f"  auth_key: 0x{a1.hex()}\n  icv: 96",
        f"- spi: 0xe2\n  aead: rfc4106(gcm(aes))\n  key: 0x{k2.hex()}\n  icv: 128",
        f"- spi: 0xe3\n  enc: cbc(aes)\n  key: 0x{k3.hex()}\n  auth: hmac(sha256)",
        f"  auth_key: 0x{a3.hex()}\n  icv: 128\n  mode: tunnel",
    ]
    save(out, "ah", frames, yaml)


if __name__ == "__main__":
    main(sys.argv[1])
