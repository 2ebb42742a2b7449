"""Seal ESP with scapy and send it over PPPoE and MPLS; write carriers.pcap + carriers.keys.yaml.

scapy's ipsec layer (an independent implementation of RFC 4303) seals the
ESP packets; scapy's PPPoE/PPP (RFC 2516, RFC 1661) and MPLS (RFC 3032)
layers carry them on Ethernet. Made once, in a throwaway venv (scapy is not
a dependency of espforensics):

    python3 -m venv /tmp/sv && /tmp/sv/bin/pip install scapy cryptography
    /tmp/sv/bin/python tests/data/scapy/make_carriers.py tests/data/scapy

Frames (tests/rewrite/test_carriers.py asserts each row): SA 0xC1 (IPv4 transport,
AES-GCM-128 ICV) seq 1-6 carrying UDP 1001-1006 -> 2000:
  1-2   Ethernet, PPPoE session 0x0007, PPP protocol 0x0021 (IPv4): seq 1-2
  3     Ethernet, PPPoE session, PPP LCP echo request (no IP)
  4-5   Ethernet, MPLS labels 100 and 200 (bottom of stack): seq 3-4
  6     Ethernet, 802.1Q VLAN 5, MPLS label 300: seq 5
  7     Ethernet, plain IPv4: seq 6
  8     Ethernet, PPPoE discovery (PADI): no IP
and SA 0xC2 (IPv6 transport, AES-CBC + HMAC-SHA2-256-128) seq 1 over PPPoE
(PPP protocol 0x0057, IPv6) in frame 9, seq 2 over MPLS in frame 10.
"""

import os
import sys

from save import save
from scapy.all import IP, UDP, Dot1Q, Ether, IPv6, Raw
from scapy.contrib.mpls import MPLS
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.ppp import PPP, PPP_LCP_Echo, PPPoE, PPPoED

V4 = ("192.0.2.1", "192.0.2.2")
V6 = ("2001:db8::1", "2001:db8::2")
ETH = {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}


def main(out: str) -> None:
    k1 = os.urandom(20)
    k2, a2 = os.urandom(16), os.urandom(32)
    gcm = SecurityAssociation(ESP, spi=0xC1, crypt_algo="AES-GCM", crypt_key=k1, auth_algo="NULL")
    cbc = SecurityAssociation(
        ESP,
        spi=0xC2,
        crypt_algo="AES-CBC",
        crypt_key=k2,
        auth_algo="SHA2-256-128",
        auth_key=a2,
    )

    def v4(n: int) -> IP:
        gcm.seq_num = n
        return gcm.encrypt(
            IP(src=V4[0], dst=V4[1]) / UDP(sport=1000 + n, dport=2000) / Raw(b"x" * 20)
        )

    def v6(n: int) -> IPv6:
        cbc.seq_num = n
        return cbc.encrypt(
            IPv6(src=V6[0], dst=V6[1]) / UDP(sport=1000 + n, dport=2000) / Raw(b"y" * 20)
        )

    pppoe = Ether(**ETH, type=0x8864) / PPPoE(sessionid=7)
    frames = [
        pppoe / PPP(proto=0x0021) / v4(1),
        pppoe / PPP(proto=0x0021) / v4(2),
        pppoe / PPP(proto=0xC021) / PPP_LCP_Echo(code=9, id=1),
        Ether(**ETH) / MPLS(label=100, s=0, ttl=64) / MPLS(label=200, s=1, ttl=64) / v4(3),
        Ether(**ETH) / MPLS(label=100, s=0, ttl=64) / MPLS(label=200, s=1, ttl=64) / v4(4),
        Ether(**ETH) / Dot1Q(vlan=5) / MPLS(label=300, s=1, ttl=64) / v4(5),
        Ether(**ETH) / v4(6),
        Ether(src=ETH["src"], dst="ff:ff:ff:ff:ff:ff", type=0x8863) / PPPoED(code=0x09),
        pppoe / PPP(proto=0x0057) / v6(1),
        Ether(**ETH) / MPLS(label=400, s=1, ttl=64) / v6(2),
    ]
    for n, frame in enumerate(frames):
        frame.time = 1_700_000_000 + n / 1000  # one millisecond apart, in order
    yaml = [
        f"- spi: 0xc1\n  aead: rfc4106(gcm(aes))\n  key: 0x{k1.hex()}\n  icv: 128",
        f"- spi: 0xc2\n  enc: cbc(aes)\n  key: 0x{k2.hex()}\n  auth: hmac(sha256)",
        f"  auth_key: 0x{a2.hex()}\n  icv: 128",
    ]
    save(out, "carriers", frames, yaml)


if __name__ == "__main__":
    main(sys.argv[1])
