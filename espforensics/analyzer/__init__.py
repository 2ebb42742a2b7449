"""The per-frame path's stages, one owner of state each; frame.py FrameAnalyzer walks them.

In: one frame at a time, from ``FrameAnalyzer.process``. Out: the stage's
part of the record and the state only it changes. Raises what each
module says (nothing but ``Truncated``/``MalformedPacket`` from decoding).

    frame.py      FrameAnalyzer: a frame through the stages below, once and forward
    receive.py    the receiver's steps over one ESP packet, in their declared order
                  (``STEPS``), and the hand-over of the packet, frozen, to the checks
    header.py     the clear SPI, sequence number and IV (RFC 4303 s2.1-s2.3)
    fragments.py  outer fragments waiting for their datagram (RFC 791 s3.2, RFC 8200 s4.5)
    flows.py      flows of (SPI, outer source, outer destination) and their SA states
    crypto.py     the verdict of one ESP packet under its SA's key (RFC 4303 s3.4)
    unverified.py the verdict of a packet of an SA without a checked ICV (RFC 4303 s3.2)
    plaintext.py  a plaintext read into the trailer and inner-packet columns (RFC 4303 s2.4)
    esn_place.py  an ESN SA's first packet that waits for its place (RFC 4303 A2.2)
    placement.py  an ESP header found later than the outer headers put it (primer s5)
    layers.py     the ESP packets inside another's plaintext (RFC 4303 s3.1)
    waiting.py    records that leave in capture order once nothing before them is held

docs/architecture.md has the table of who owns which state and how a
packet walks through the stages once, forward.
"""
