"""Cost of in-process snapshots of the tau2 telecom state, side by side in one process.

Compares our pickle snapshot + restore with deepcopy and pydantic deep model_copy,
and the lazy content digest.  Prints one JSON object.

    python experiments/snapshot_cost.py --data-dir ../shared/data/tau2
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

from envs.tau2_telecom.bench import TelecomBench

TASK = "[mms_issue]airplane_mode_on|bad_network_preference|bad_wifi_calling|break_apn_mms_setting|break_app_both_permissions|data_mode_off|data_usage_exceeded|unseat_sim_card|user_abroad_roaming_disabled_off[PERSONA:Hard]"


def median_us(fn, repeats: int, rounds: int = 5) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        samples.append((time.perf_counter() - started) / repeats * 1e6)
    return round(statistics.median(samples), 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()
    bench = TelecomBench.from_data_dir(args.data_dir)
    env = bench.environment(bench.task(TASK), solo=True)
    snap = env.snapshot()
    dbs = (env.carrier.db, env.phone.db)
    result = {
        "state_bytes_pickled": len(snap.data),
        "snapshot_us": median_us(env.snapshot, args.repeats),
        "restore_us": median_us(lambda: env.restore(snap), args.repeats),
        "digest_us": median_us(lambda: env.state_digest(), args.repeats),
        "deepcopy_us": median_us(lambda: copy.deepcopy(dbs), args.repeats),
        "model_copy_deep_us": median_us(lambda: [db.model_copy(deep=True) for db in dbs], args.repeats),
    }
    result["deepcopy_over_snapshot_plus_restore"] = round(
        result["deepcopy_us"] / (result["snapshot_us"] + result["restore_us"]), 2
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
