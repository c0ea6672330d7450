"""tree_md5.py: what a folder holds, to show that a command left it as it
was (tests/reliability.py, tests/reliability_scripts.py)."""
import hashlib
import os
import stat


def md5s(root):
    """{path relative to root: md5} of every file under root, hidden ones
    too; a FIFO or device is named by its mode (never read), a symlink
    left out."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            mode = os.lstat(p).st_mode
            if not stat.S_ISREG(mode):  # a FIFO or device: never read it
                out[os.path.relpath(p, root)] = f"special {mode:o}"
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.md5(f.read()).hexdigest()
    return out
