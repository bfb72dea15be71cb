"""Send a task by name, as a producer on another build does: `python -m shopdemo.send NAME KEY [ARGS_JSON]`.

ARGS_JSON replaces the arguments (default [KEY]); prints the task id. Does not wait.
"""

from __future__ import annotations

import json
import sys

from shopdemo.celery import app


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    name, key = args[0], args[1]
    arguments = json.loads(args[2]) if len(args) > 2 else [key]
    print(app.send_task(name, args=arguments, queue="default").id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
