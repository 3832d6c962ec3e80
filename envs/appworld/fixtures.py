"""Generate agentspec's OWN small AppWorld-format data folder (not AppWorld's tasks) from the installed package.

Runs inside the AppWorld venv (it imports ``appworld``)::

    ~/.cache/agentspec/appworld/venv/bin/python envs/appworld/fixtures.py OUT_ROOT

and writes ``OUT_ROOT/data`` in AppWorld's own on-disk layout, so that the real engine loads, runs and evaluates it:

- ``api_docs/standard/<app>.json``: the API docs, built from the package's app code (``ApiDocCollection.build``);
- ``base_dbs/<app>.db``: every app's database with its schema, the API docs as ``api_docs`` rows, and one made-up
  supervisor (profile, addresses, account passwords, a SimpleNote account);
- ``tasks/<task_id>/``: ``specs.json``, ``dbs/<app>.jsonl`` (the task's changes on top of the base, with
  ``model_hashes.json``) and ``ground_truth/`` in "full" mode: ``solution.py``, ``compiled_solution.py``,
  ``evaluation.py``, ``answer.json``, ``test_data.json``, ``metadata.json``, and ``api_calls.json`` recorded by
  running the solution in a real ``AppWorld`` (as AppWorld records its own);
- ``datasets/<split>.txt``: the task ids of each split.

Every task, person and value here was made up by agentspec for its tests; the instructions say so.  None of it
comes from AppWorld's data bundle (which is licensed separately and never shipped or committed here).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from textwrap import dedent
from typing import Any

LABEL = "[agentspec fixture, not an AppWorld task]"
SUPERVISOR = {"first_name": "Ada", "last_name": "Quill", "email": "ada.quill@fixture.example",
              "phone_number": "5550100001"}
NOTE_PASSWORD = "fixture-note-pw"
DATETIME = "2023-05-18T12:00:00"

TASKS: dict[str, dict[str, Any]] = {
    # scenario "agspecaddr": questions answered from the supervisor app (read-only calls, then complete_task)
    "agspecaddr_1": {
        "instruction": f"{LABEL} What is the city of my address named 'Home'?",
        "answer": "Lakeview",
        "solution": """
            addresses = apis.supervisor.show_addresses()
            home = [a for a in addresses if a["name"] == "Home"][0]
            apis.supervisor.complete_task(answer=home["city"])
        """,
        "evaluation": """
            with test(\"\"\"the answer given is the city of the 'Home' address\"\"\"):
                task = models.end.supervisor.Task.all()[0]
                test.answer(json.loads(task.answer), ground_truth_answer)
        """,
        "tests": ["the answer given is the city of the 'Home' address"],
        "difficulty": 1,
    },
    "agspecaddr_2": {
        "instruction": f"{LABEL} In which city is my address named 'Work'?",
        "answer": "Millbrook",
        "solution": """
            addresses = apis.supervisor.show_addresses()
            work = [a for a in addresses if a["name"] == "Work"][0]
            apis.supervisor.complete_task(answer=work["city"])
        """,
        "evaluation": """
            with test(\"\"\"the answer given is the city of the 'Work' address\"\"\"):
                task = models.end.supervisor.Task.all()[0]
                test.answer(json.loads(task.answer), ground_truth_answer)
        """,
        "tests": ["the answer given is the city of the 'Work' address"],
        "difficulty": 1,
    },
    # scenario "agspecnote": a change to SimpleNote (login, a mutating call, complete_task)
    "agspecnote_1": {
        "instruction": f"{LABEL} Add a note titled 'Seeds' saying 'buy basil seeds' to my SimpleNote account.",
        "answer": None,
        "solution": """
            passwords = apis.supervisor.show_account_passwords()
            password = [p for p in passwords if p["account_name"] == "simple_note"][0]["password"]
            profile = apis.supervisor.show_profile()
            token = apis.simple_note.login(username=profile["email"], password=password)["access_token"]
            apis.simple_note.create_note(title="Seeds", content="buy basil seeds", access_token=token)
            apis.supervisor.complete_task()
        """,
        "evaluation": """
            with test(\"\"\"exactly one note was added, titled 'Seeds', with the asked content\"\"\"):
                added, updated, removed = models.changed_records("simple_note.Note")
                test.case(len(added), "==", 1)
                test.case(added[0].title, "==", "Seeds")
                test.case(added[0].content.strip(), "==", "buy basil seeds")
            with test(\"\"\"no existing note was changed or removed\"\"\"):
                test.case(len(updated) + len(removed), "==", 0)
            with test(\"\"\"the task was completed without an answer\"\"\"):
                task = models.end.supervisor.Task.all()[0]
                test.case(task.status, "==", "success")
                test.answer(json.loads(task.answer), ground_truth_answer)
        """,
        "tests": ["exactly one note was added, titled 'Seeds', with the asked content",
                  "no existing note was changed or removed", "the task was completed without an answer"],
        "difficulty": 2,
    },
}
SPLITS = {"train": ["agspecaddr_1", "agspecnote_1"], "dev": ["agspecaddr_1", "agspecaddr_2", "agspecnote_1"],
          "test_normal": ["agspecaddr_2"], "test_challenge": ["agspecnote_1"]}


def _write_json(value: Any, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as file:
        json.dump(value, file, indent=2)


def _write_text(text: str, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as file:
        file.write(text)


def _api_docs(data: str, apps: list[str]) -> dict[str, dict[str, dict]]:
    from appworld.collections.api_docs import ApiDocCollection
    from appworld.common.constants import CANARY_STRING

    built = ApiDocCollection.build(load_apps=tuple(apps), include_response_schemas=True)
    docs: dict[str, dict[str, dict]] = {}
    for app in apps:
        docs[app] = {name: {**dict(doc), "canary_string": CANARY_STRING} for name, doc in built[app].items()}
        _write_json(docs[app], os.path.join(data, "api_docs", "standard", f"{app}.json"))
    return docs


def _base_dbs(data: str, docs: dict[str, dict[str, dict]]) -> None:
    """Every app's schema, the API docs as rows and the made-up supervisor, saved as full databases."""
    from appworld.apps import get_all_apps
    from appworld.apps.model_lib import ModelHashHandler
    from appworld.collections.models import ModelCollection

    base = os.path.join(data, "base_dbs")
    os.makedirs(base, exist_ok=True)
    models = ModelCollection.load(to_db_home_path=base, from_db_home_path=base, load_apps=get_all_apps(),
                                  create_db=True)
    for app, api_docs in docs.items():
        for doc in api_docs.values():
            models.api_docs.ApiDoc.create(
                app_name_=app, api_name=doc["api_name"], path=doc["path"], method=doc["method"],
                description=doc["description"], parameters=doc["parameters"],
                response_schemas=doc.get("response_schemas", {}),
            ).save()
    main_user = models.admin.MainUser.create(**SUPERVISOR, birthday="1990-04-02", sex="female")
    main_user.save()
    models.admin.AccountPassword.create(main_user_id=main_user.id, account_name="simple_note",
                                        password=NOTE_PASSWORD).save()
    supervisor = models.supervisor.Supervisor.create(**SUPERVISOR, birthday="1990-04-02", sex="female")
    supervisor.save()
    for name, city in (("Home", "Lakeview"), ("Work", "Millbrook")):
        models.supervisor.Address.create(supervisor_id=supervisor.id, name=name, street_address=f"1 {name} Lane",
                                         city=city, state="Ohio", country="United States", zip_code="43001").save()
    models.supervisor.AccountPassword.create(supervisor_id=supervisor.id, account_name="simple_note",
                                             password=NOTE_PASSWORD).save()
    user = models.simple_note.User.create(first_name=SUPERVISOR["first_name"], last_name=SUPERVISOR["last_name"],
                                          email=SUPERVISOR["email"], password=NOTE_PASSWORD,
                                          created_at="2023-01-02T09:00:00", verified=True)
    user.save()
    models.simple_note.Note.create(user_id=user.id, title="Books", content="read the fixture novel",
                                   created_at="2023-02-01T10:00:00", updated_at="2023-02-01T10:00:00").save()
    ModelHashHandler.save(base, base)
    models.close()


def _task_dbs(task_id: str, spec: dict[str, Any]) -> None:
    """The task's own rows (its supervisor task) as AppWorld's "changes" files on top of the base databases."""
    from appworld.apps import get_all_apps
    from appworld.apps.api_lib import save_local_dbs
    from appworld.apps.model_lib import get_db_home_path
    from appworld.collections.models import ModelCollection

    memory = f":memory:task_input-{task_id}"
    base = get_db_home_path(storage_type="disk", type="base")
    models = ModelCollection.load(to_db_home_path=memory, from_db_home_path=base, load_apps=get_all_apps())
    supervisor = models.supervisor.Supervisor.find_one(email=SUPERVISOR["email"])
    models.supervisor.Task.create(supervisor_id=supervisor.id, instruction=spec["instruction"]).save()
    target = get_db_home_path(storage_type="disk", type="task_input", task_id=task_id)
    save_local_dbs(from_db_home_path=memory, to_db_home_path=target, format="changes", app_names=get_all_apps(),
                   delete_if_exists=True, save_model_hashes=True)
    models.close()


def _function(name: str, args: str, body: str) -> str:
    return f"def {name}({args}):\n" + "\n".join("    " + line if line else "" for line in dedent(body).strip().splitlines()) + "\n"


def _ground_truth(data: str, task_id: str, spec: dict[str, Any]) -> str:
    from appworld.common.constants import CANARY_STRING, DB_VERSION

    task_dir = os.path.join(data, "tasks", task_id)
    _write_json({"instruction": spec["instruction"], "supervisor": SUPERVISOR, "datetime": DATETIME,
                 "db_version": DB_VERSION, "canary_string": CANARY_STRING}, os.path.join(task_dir, "specs.json"))
    truth = os.path.join(task_dir, "ground_truth")
    solution = _function("solution", "apis, requester", spec["solution"])
    _write_text(solution, os.path.join(truth, "solution.py"))
    _write_text(solution, os.path.join(truth, "compiled_solution.py"))
    evaluation = "import json\n\n\n" + _function(
        "evaluate", "test, public_data, private_data, main_user, models, ground_truth_answer", spec["evaluation"])
    _write_text(evaluation, os.path.join(truth, "evaluation.py"))
    _write_text(json.dumps(spec["answer"]), os.path.join(truth, "answer.json"))
    _write_json({}, os.path.join(truth, "public_data.json"))
    _write_json({}, os.path.join(truth, "private_data.json"))
    _write_json([{"requirement": text, "label": "no_op_fail"} for text in spec["tests"]],
                os.path.join(truth, "test_data.json"))
    apps = sorted({line.split("apis.")[1].split(".")[0] for line in spec["solution"].splitlines() if "apis." in line}
                  - {"supervisor", "api_docs"})
    apis = {line.split("apis.")[1].split("(")[0] for line in spec["solution"].splitlines() if "apis." in line}
    _write_json({"mode": "full", "difficulty": spec["difficulty"], "num_apps": len(apps), "num_apis": len(apis),
                 "num_solution_code_lines": len(dedent(spec["solution"]).strip().splitlines()),
                 "source": "agentspec fixture"}, os.path.join(truth, "metadata.json"))
    _write_json(apps, os.path.join(truth, "required_apps.json"))
    return truth


def _record_api_calls(task_id: str, truth: str) -> None:
    """Run the solution in a real AppWorld and keep the requests it made (AppWorld's ``api_calls.json``)."""
    from appworld.environment import AppWorld

    with open(os.path.join(truth, "solution.py")) as file:
        body = dedent("\n".join(file.read().splitlines()[1:]))
    with AppWorld(task_id=task_id, experiment_name="agentspec-fixture-gen") as world:
        output = world.execute(body)
        if "Execution failed" in output:
            raise RuntimeError(f"fixture solution of {task_id} failed: {output}")
        calls = [dict(request) for request in world.requester.requests]
        tracker = world.evaluate()
        if not tracker.success:
            raise RuntimeError(f"fixture solution of {task_id} does not pass its evaluation: {tracker.failures}")
    _write_json(calls, os.path.join(truth, "api_calls.json"))


def generate(root: str) -> str:
    """Write the fixture data folder under ``root`` (``root/data``, replacing one there); returns ``root``."""
    root = os.path.abspath(root)
    os.environ["APPWORLD_ROOT"] = root
    from appworld.apps import get_all_apps
    from appworld.common.path_store import path_store

    path_store.update_root(root)
    data = os.path.join(root, "data")
    shutil.rmtree(data, ignore_errors=True)
    docs = _api_docs(data, get_all_apps(skip_admin=True))
    _base_dbs(data, docs)
    for task_id, spec in TASKS.items():
        _task_dbs(task_id, spec)
        truth = _ground_truth(data, task_id, spec)
        _record_api_calls(task_id, truth)
    for split, ids in SPLITS.items():
        _write_text("\n".join(ids) + "\n", os.path.join(data, "datasets", f"{split}.txt"))
    _write_text("Generated by agentspec (envs/appworld/fixtures.py): made-up tasks for tests, not AppWorld's.\n",
                os.path.join(data, "AGENTSPEC_FIXTURES.txt"))
    shutil.rmtree(os.path.join(root, "experiments"), ignore_errors=True)
    return root


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python fixtures.py OUT_ROOT")
    print(json.dumps({"root": generate(sys.argv[1]), "tasks": sorted(TASKS)}))
