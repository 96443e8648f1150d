"""Rank <victim> exits with <code> after a moment; the others sleep (launcher tests)."""

import os
import sys
import time

victim, code, marker = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rank = int(os.environ["RANK"])
if rank == victim:
    time.sleep(0.3)
    sys.exit(code)
with open(f"{marker}.{rank}", "w") as f:
    f.write(str(os.getpid()))
time.sleep(120)
