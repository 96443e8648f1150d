"""Write this process's rank variables as JSON to <dir>/rank<RANK>.json (launcher tests)."""

import json
import os
import sys

KEYS = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NCCL_NVLS_ENABLE",
]
out = sys.argv[1]
with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"env": {k: os.environ.get(k) for k in KEYS}, "argv": sys.argv[2:]}, f)
