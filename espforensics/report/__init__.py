"""What the reports say, in words, before any format lays it out.

content.py gathers a report's content (``report_content``) from the
summary: lead.py its first lines, narrative.py the findings told in
groups, facts.py and causes.py what the evidence proves and its likely
causes, check_results.py what each check examined, captions.py the plots'
captions, filters.py the tcpdump and Wireshark filters that select a
finding's frames. render/ only formats it.
"""
