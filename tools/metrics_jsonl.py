"""metrics_jsonl — how the tools (compare_runs, plot_metrics) read mnist_ddp's metrics.jsonl: every
line one JSON object of a schema this reader knows, or one clear line naming the file (and the
line) and what to pass instead, exit status 1, no traceback.

A record cut short (a job killed in the middle of writing it) is the one damage that is read
around, with a warning naming the line: as the last line, or directly before a start record (the
next run appended after it; mnist_ddp ends the fragment's line first). A line that is not a record
anywhere else means the file was written by two jobs at once or damaged: refused.
"""
import json
import sys

METRICS_SCHEMA = 2  # log.hpp kMetricsSchema: the newest this reader knows
HINT = "pass a metrics.jsonl that mnist_ddp wrote (<--log-dir>/metrics.jsonl)"


def refuse(tool, text):
    sys.exit(f"{tool}: {text}")


def starts_a_run(lines, n):
    """Whether the first non-blank line after line n (1-based) is a start record."""
    for line in lines[n:]:
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError:
                return False
            return isinstance(rec, dict) and rec.get("event") == "start"
    return False


def read_metrics(path, tool):
    """The records of the file at `path`, in order (dicts); exits with one line when it is empty,
    not text, not JSON lines, or holds no mnist_ddp record."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        refuse(tool, f"{path}: cannot read it ({e.strerror}); {HINT}")
    if not data.strip():
        refuse(tool, f"{path} is empty: no records (a run writes its first at its start); {HINT}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        refuse(tool, f"{path} is not a text file (byte {e.start} is not UTF-8): not a metrics "
                     f"file; {HINT}")
    lines = text.split("\n")
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            rec, why = None, f"not JSON: {e}"
        else:
            why = f"a JSON {type(rec).__name__}, not a record"
        if not isinstance(rec, dict):
            if n == len(lines) and records:  # the last line, with no newline after it
                print(f"{tool}: warning: {path}:{n}: the last line is cut short (a job killed "
                      f"while writing it?); reading the {len(records)} records before it",
                      file=sys.stderr)
                break
            if records and starts_a_run(lines, n):
                # Cut short by a job that died, then a later run (or its resume) appended.
                print(f"{tool}: warning: {path}:{n}: a record cut short before the next run's "
                      f"start (a job killed while writing it?); skipped", file=sys.stderr)
                continue
            refuse(tool, f"{path}:{n}: not a metrics record ({why}): the file was written by two "
                         f"jobs at once or is damaged, or is not a metrics file; {HINT}")
        schema = rec.get("schema", 1)
        if not isinstance(schema, int) or schema > METRICS_SCHEMA:
            refuse(tool, f"{path}:{n}: metrics schema {schema}, this {tool} reads 1 to "
                         f"{METRICS_SCHEMA}: use the tools/ of the mnist_ddp that wrote it")
        records.append(rec)
    if not any("event" in r for r in records):
        refuse(tool, f"{path} holds JSON objects but no mnist_ddp record (none has an \"event\"); "
                     f"{HINT}")
    return records


def last_lineage(records):
    """The records of the file's last run: every span that a start record of the last start's run
    id opens, up to the next start of another run (a resumed run continues its lineage; a new run
    in the same --log-dir appends another, and runs may take turns: A, B, A resumed). All of them
    where no record is a start (metrics of an mnist_ddp without start records)."""
    starts = [r for r in records if r.get("event") == "start"]
    if not starts:
        return records
    rid = starts[-1].get("run_id")
    out, current = [], None
    for r in records:
        if r.get("event") == "start":
            current = r.get("run_id")
        if current == rid:
            out.append(r)
    return out
