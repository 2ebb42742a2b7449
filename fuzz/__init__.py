"""A deterministic, structure-aware fuzz harness for espforensics (not part of the product).

In: a seed and a budget of inputs. Out: a tally of inputs tried per kind,
outcomes (ok, input error, internal error) and failures grouped by class,
each with one minimized example saved to a folder. Raises nothing of its
own: every exception of the code under test becomes an outcome.

Layout (data flows one way)::

    seeds      fixture scenarios, their frames, SAs and key texts
    steady     long steady runs (the engine's steady lane) with faults inside
    packets    mutators of the bytes inside frames (IP, ext headers, UDP, ESP)
    captures   pcap / pcapng writers whose every field can be mutated
    keytext    mutators of keys.yaml, ``ip xfrm state`` text and esp_sa lines
    inputs     one input per (seed, index): kind, files as chunks, secrets
    walker     an independent frame counter for pcap / pcapng bytes
    leaks      the key-byte scanner (hex any case, 0x or not, raw)
    oracle     runs the library entry points; outcome and failure class
    lanecount  frames the steady lane took and refused, per input
    minimize   delta debugging over an input's chunks
    campaign   a block of inputs judged in one process, tallied
    run        the command line: ``python -m fuzz --inputs N --seed S``
    atheris_main  an optional coverage-guided entry point (atheris)

The product does not import this package; it is not installed with it.
"""
