"""A Python worker that speaks the worker channel through python/elastic_worker.py, for
worker_channel_integ_test: hello(live), wait for a round, print what it was told (as the
torchrun variables round_environ() gives), joined, then wait for a stop (exit 0) or the
daemon's end of file (exit 3). Exit 2: no channel."""

import sys

import elastic_worker

link = elastic_worker.channel()
if link is None:
    print("no channel: ELASTIC_WORKER_FD is not set", file=sys.stderr)
    sys.exit(2)
link.hello(live=True)
print("said hello on fd %d" % link.fileno(), flush=True)
while True:
    try:
        message = link.receive(timeout=120)
    except elastic_worker.ChannelError as error:
        print("channel ended: %s" % error, flush=True)
        sys.exit(3)
    if message is None:
        print("no instruction within 2 minutes", file=sys.stderr)
        sys.exit(2)
    if message["type"] == "stop":
        print("stop: %s" % message["reason"], flush=True)
        sys.exit(0)
    env = elastic_worker.round_environ(message)
    print("round %s term %s rank %s of %s store %s:%s job %s" % (
        env["ELASTIC_ROUND"], message["term"], env["RANK"], env["WORLD_SIZE"],
        env["MASTER_ADDR"], env["MASTER_PORT"], env["ELASTIC_JOB_ID"]), flush=True)
    link.joined(message["round"], message["term"])
