"""The append-only run log and effect ids: committed effects are applied exactly once.

Every committed step gets an *effect id* = sha256(task id, step index,
canonical call).  The executor appends ``intent`` records (flushed and fsynced)
before it changes the live state, and then one ``commit`` record for the whole
batch it committed (one step, or every step of a macro), carrying the
observations and a checkpoint of the live state after the batch (see
:mod:`agentspec.checkpoint`: data, never pickle from the log).  One record per
batch makes a batch atomic: a crash leaves the log with all of it or none.

A resumed run reads the log back: finished tasks are not run again; an
unfinished task continues from its last checkpoint with its committed history,
so no committed effect is applied twice.  The log is also a file a user may be
handed by someone else, so every line is validated: a malformed record, a
commit without its intent, an effect id that does not match its call, or a gap
in a task's steps is refused with the line number.

Every record carries ``mac``, an HMAC-SHA256 under this user's key (:func:`agentspec.checkpoint.sign`, the key
that signs pickled checkpoints) of the previous record's ``mac`` followed by the record (canonical JSON, without
``mac``); the header, which holds a random ``run_id``, starts the chain.  So a record edited after it was written (a
reward, a message, a checkpoint), written by anyone without the key, taken from another log (another run of the same
tasks under other settings), removed, or moved is refused with its line before anything is used.  The header
records the run's configuration (:meth:`agentspec.run_spec.RunSpec.result_settings`): a resume under other settings
is refused with the fields that differ, and a finished task's record holds a digest of the task's data, so a task
whose data changed is not taken from the log.

One run at a time writes into an output folder: :func:`~agentspec.runtime.runlog.lock.locked_out` holds an exclusive
lock on ``<out>/.agentspec.lock`` for the whole run, and a second run into the same folder is refused with the holder.

The log's parts: what a record holds and how it is signed (:mod:`~agentspec.runtime.runlog.records`), writing
(:mod:`~agentspec.runtime.runlog.writer`), reading it back for a resume (:mod:`~agentspec.runtime.runlog.replay`),
and the output folder's lock (:mod:`~agentspec.runtime.runlog.lock`).
"""
