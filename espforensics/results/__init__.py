"""What a run found, counted once: the summary and how it is built and stored.

summary.py holds ``Summary`` (the frozen value every report and
summary.json is made from) and its JSON form; builder.py counts the
records and the steady lane's rows into it (``SummaryBuilder``);
coverage.py tallies what each check examined; stored.py reads back the
evidence a summary.json holds.
"""
