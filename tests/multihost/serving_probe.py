"""Run on a host of the multi-host test (ip netns exec): waits until the
serving replica at --replica serves step --steps, then looks up the keys
of the first batch of --data's test.txt and saves keys and rows to --out
(.npz). Exit 1 with the last answer if the step does not come."""

import argparse
import sys
import time

import numpy as np

import embedps


def main():
    parser = argparse.ArgumentParser()
    for flag in ("replica", "certs", "data", "out"):
        parser.add_argument(f"--{flag}", required=True)
    parser.add_argument("--steps", type=int, required=True)
    args = parser.parse_args()
    serving = embedps.ServingClient([[args.replica]], deadline=5, attempt_timeout=5,
                                    tls_ca=f"{args.certs}/ca.pem",
                                    token_file=f"{args.certs}/read.token")
    deadline = time.monotonic() + 60
    last = None
    while True:
        try:
            last = serving.versions()[0][0]
            if last["step"] == args.steps:
                break
        except embedps.Error as error:
            last = error
        if time.monotonic() > deadline:
            sys.exit(f"the replica never served step {args.steps}: {last!r}")
        time.sleep(0.1)
    reader = embedps.CriteoReader([f"{args.data}/test.txt"], batch_size=64, include_tail=True)
    _, _, _, keys = next(iter(reader))
    keys = np.unique(keys.reshape(-1))
    (rows,), version = serving.lookup([embedps.Slot("criteo", 16, keys, pooling="none")])
    np.savez(args.out, keys=keys, rows=rows, version=version)


if __name__ == "__main__":
    main()
