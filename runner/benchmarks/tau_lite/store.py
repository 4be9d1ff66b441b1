"""The domain state in SQLite (WAL), owned by the destination: rows, ledger, one transaction.

One database file per attempt, created from the pristine db.json. A table per tau2 collection
(airline: flights, reservations, users; retail: orders, products, users): the key, the
columns a lookup needs (mirrored from the row), the db.json order (`ord`: tau2 iterates its
dicts in that order, so searches answer in it), and the row as canonical JSON. The `ledger`
table records every write-tool call of a scope: committed ones with the intent key of
runner/benchmarks/tau_lite/intents.py and whether the state changed; rejected ones (a domain
rule refused: the agent's error) with the refusal. A committed call's rows and its ledger row
are written in ONE transaction (`BEGIN IMMEDIATE` .. `COMMIT`, synchronous=FULL): there is no
moment where one is durable and the other not.

`state_hash()` is tau2's own DB hash (sha256 of `json.dumps(model_dump(), sort_keys=True)`),
built from the stored row texts, which are that dump's bytes per row.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.benchmarks.tau_lite.schema import COLLECTIONS, normalize_db

SCHEMA_VERSION = "2"

DDL: dict[str, str] = {
    "airline": """
CREATE TABLE flights(
  flight_number TEXT PRIMARY KEY, ord INTEGER NOT NULL,
  origin TEXT NOT NULL, destination TEXT NOT NULL,
  doc TEXT NOT NULL CHECK (json_valid(doc)));
CREATE INDEX flights_route ON flights(origin, destination);
CREATE TABLE users(
  user_id TEXT PRIMARY KEY, ord INTEGER NOT NULL, email TEXT NOT NULL,
  doc TEXT NOT NULL CHECK (json_valid(doc)));
CREATE TABLE reservations(
  reservation_id TEXT PRIMARY KEY, ord INTEGER NOT NULL,
  user_id TEXT NOT NULL, status TEXT,
  doc TEXT NOT NULL CHECK (json_valid(doc)));
CREATE INDEX reservations_user ON reservations(user_id);
""",
    "retail": """
CREATE TABLE products(
  product_id TEXT PRIMARY KEY, ord INTEGER NOT NULL, name TEXT NOT NULL,
  doc TEXT NOT NULL CHECK (json_valid(doc)));
CREATE TABLE users(
  user_id TEXT PRIMARY KEY, ord INTEGER NOT NULL, email TEXT NOT NULL,
  doc TEXT NOT NULL CHECK (json_valid(doc)));
CREATE TABLE orders(
  order_id TEXT PRIMARY KEY, ord INTEGER NOT NULL,
  user_id TEXT NOT NULL, status TEXT NOT NULL,
  doc TEXT NOT NULL CHECK (json_valid(doc)));
CREATE INDEX orders_user ON orders(user_id);
""",
}
COMMON_DDL = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ledger(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  effect_id TEXT NOT NULL UNIQUE,
  scope TEXT NOT NULL,
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL CHECK (json_valid(arguments)),
  outcome TEXT NOT NULL CHECK (outcome IN ('committed', 'rejected')),
  changed INTEGER NOT NULL CHECK (changed IN (0, 1)),
  intent TEXT,
  state_after TEXT,
  result TEXT,
  error TEXT,
  idempotency_key TEXT,
  call_id TEXT,
  committed_at_ns TEXT NOT NULL,
  CHECK ((outcome = 'committed') = (error IS NULL)),
  CHECK ((outcome = 'committed') = (state_after IS NOT NULL)));
CREATE INDEX ledger_scope ON ledger(scope, seq);
"""

# table -> key column, mirrored lookup columns (name -> row field)
_COLUMNS: dict[str, dict[str, tuple[str, dict[str, str]]]] = {
    "airline": {
        "flights": ("flight_number", {"origin": "origin", "destination": "destination"}),
        "users": ("user_id", {"email": "email"}),
        "reservations": ("reservation_id", {"user_id": "user_id", "status": "status"}),
    },
    "retail": {
        "products": ("product_id", {"name": "name"}),
        "users": ("user_id", {"email": "email"}),
        "orders": ("order_id", {"user_id": "user_id", "status": "status"}),
    },
}


def _insert_sql(table: str, names: list[str]) -> str:
    return f"INSERT INTO {table}({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


def row_text(doc: Any) -> str:
    """A row as tau2's hash dumps it: json.dumps defaults, keys sorted."""
    return json.dumps(doc, sort_keys=True)


class DomainError(ValueError):
    """A domain rule refused the call (tau2 raises ValueError): the agent's error."""


class StoreError(Exception):
    """The database is not this domain's, or not a tau_lite store (names the file)."""


@dataclass(frozen=True)
class CallOutcome:
    """What one tool call did: its ledger row (writes) and what the agent is answered."""

    tool: str
    ok: bool
    result: Any = None
    error: str | None = None
    effect_id: str | None = None
    changed: bool = False
    replayed: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool, "ok": self.ok}
        if self.ok:
            out["result"] = self.result
        else:
            out["error"] = self.error
        if self.effect_id is not None:
            out["effect_id"] = self.effect_id
        if self.replayed:
            out["replayed"] = True
        return out


class Tx:
    """The rows one tool call reads and writes, inside the store's open transaction."""

    def __init__(self, conn: sqlite3.Connection, domain: str, meta: Mapping[str, str]) -> None:
        self._conn = conn
        self._domain = domain
        self.meta = meta
        self._loaded: dict[tuple[str, str], tuple[str | None, Any]] = {}  # original text, live

    def _key_col(self, table: str) -> str:
        return _COLUMNS[self._domain][table][0]

    def get(self, table: str, key: str) -> dict[str, Any] | None:
        """The live (mutable) row, None when absent; changes are written by `flush`."""
        if not isinstance(key, str):
            return None
        if (table, key) not in self._loaded:
            cur = self._conn.execute(
                f"SELECT doc FROM {table} WHERE {self._key_col(table)} = ?", (key,)
            )
            row = cur.fetchone()
            if row is None:
                return None
            self._loaded[(table, key)] = (row[0], json.loads(row[0]))
        live: dict[str, Any] = self._loaded[(table, key)][1]
        return live

    def scan(self, table: str) -> Iterator[Any]:
        """Every row in db.json order (read-only: not written back)."""
        for (text,) in self._conn.execute(f"SELECT doc FROM {table} ORDER BY ord"):
            yield json.loads(text)

    def insert(self, table: str, key: str, doc: Any) -> None:
        self._loaded[(table, key)] = (None, doc)

    def flush(self) -> bool:
        """Write every changed row; True if any row changed."""
        changed = False
        for (table, key), (original, doc) in self._loaded.items():
            text = row_text(doc)
            if text == original:
                continue
            changed = True
            key_col, mirrors = _COLUMNS[self._domain][table]
            cols = {name: doc.get(field) for name, field in mirrors.items()}
            if original is None:
                (ord_,) = self._conn.execute(
                    f"SELECT COALESCE(MAX(ord), -1) + 1 FROM {table}"
                ).fetchone()
                names = [key_col, "ord", *cols, "doc"]
                self._conn.execute(
                    _insert_sql(table, names),
                    (key, ord_, *cols.values(), text),
                )
            else:
                sets = ", ".join(f"{c} = ?" for c in [*cols, "doc"])
                self._conn.execute(
                    f"UPDATE {table} SET {sets} WHERE {key_col} = ?", (*cols.values(), text, key)
                )
        return changed


Hook = Callable[[str], None]


class Store:
    """One domain's state and ledger in one SQLite file. Thread-safe (one lock, one conn)."""

    def __init__(self, path: Path, *, hook: Hook | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise StoreError(f"{self.path}: no such store")
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._hook = hook  # tests only: called at named points inside a write transaction
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")  # a COMMIT is durable before we answer
            self.meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{self.path}: not a tau_lite store ({exc})") from None
        if self.meta.get("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {self.meta.get('schema_version')!r}")
        self.domain = self.meta["domain"]

    @classmethod
    def create(
        cls, path: Path, domain: str, db: Any, meta: Mapping[str, str] | None = None, **kw: Any
    ) -> Store:
        """A new store at `path` holding db.json `db` (normalized as tau2 loads it)."""
        doc = normalize_db(domain, db)
        path = Path(path)
        if path.exists():
            raise StoreError(f"{path}: exists; a store is created once")
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN")
            for stmt in (DDL[domain] + COMMON_DDL).split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            for table, (key_col, mirrors) in _COLUMNS[domain].items():
                names = [key_col, "ord", *mirrors, "doc"]
                sql = _insert_sql(table, names)
                conn.executemany(
                    sql,
                    [
                        (key, i, *(row.get(f) for f in mirrors.values()), row_text(row))
                        for i, (key, row) in enumerate(doc[table].items())
                    ],
                )
            all_meta = {"schema_version": SCHEMA_VERSION, "domain": domain, **(meta or {})}
            conn.executemany("INSERT INTO meta VALUES (?, ?)", sorted(all_meta.items()))
            conn.execute("COMMIT")
        finally:
            conn.close()
        return cls(path, **kw)

    def copy_to(self, path: Path, **kw: Any) -> Store:
        """A byte-level copy of this store (SQLite's backup: consistent under WAL)."""
        dest = sqlite3.connect(path)
        try:
            with self._lock:
                self._conn.backup(dest)
        finally:
            dest.close()
        return Store(path, **kw)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- reading the state -----------------------------------------------------------

    def document(self) -> dict[str, dict[str, Any]]:
        """The whole DB as tau2's model_dump (for diffs; the hash does not build it)."""
        doc: dict[str, dict[str, Any]] = json.loads(self._canonical())
        return doc

    def _canonical(self) -> str:
        with self._lock:
            return self._canonical_locked()

    def _canonical_locked(self) -> str:
        parts = []
        for table in sorted(COLLECTIONS[self.domain]):
            key_col = _COLUMNS[self.domain][table][0]
            rows = self._conn.execute(f"SELECT {key_col}, doc FROM {table} ORDER BY {key_col}")
            inner = ", ".join(f"{json.dumps(k)}: {d}" for k, d in rows)
            parts.append(f"{json.dumps(table)}: {{{inner}}}")
        return "{" + ", ".join(parts) + "}"

    def state_hash(self) -> str:
        """tau2's `DB.get_hash()` of this state."""
        return hashlib.sha256(self._canonical().encode()).hexdigest()

    def ledger(self, scope: str | None = None) -> list[dict[str, Any]]:
        """Every journaled write call (committed and rejected) in commit order."""
        sql = "SELECT * FROM ledger" + (" WHERE scope = ?" if scope is not None else "")
        with self._lock:
            cur = self._conn.execute(sql + " ORDER BY seq", (() if scope is None else (scope,)))
            names = [c[0] for c in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        for r in rows:
            r["arguments"] = json.loads(r["arguments"])
            r["result"] = None if r["result"] is None else json.loads(r["result"])
            r["changed"] = bool(r["changed"])
        return rows

    # ---- calls -----------------------------------------------------------------------

    def read(self, fn: Callable[..., Any], args: Mapping[str, Any]) -> Any:
        """Run a read tool in a read transaction (a consistent snapshot; nothing written)."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                return fn(Tx(self._conn, self.domain, self.meta), **args)
            finally:
                self._conn.execute("ROLLBACK")

    def write(
        self,
        tool: str,
        fn: Callable[..., Any],
        args: Mapping[str, Any],
        *,
        scope: str,
        intent: Callable[[Tx, Mapping[str, Any]], str] | None = None,
        idempotency_key: str | None = None,
        dedup: bool = False,
        call_id: str | None = None,
    ) -> CallOutcome:
        """Run a write tool: the state change and its ledger row commit together, or neither.

        A DomainError (the domain refused) rolls the state back and journals the refusal in
        its own transaction; any other exception is a harness bug and propagates (rolled back,
        nothing journaled)."""
        args_text = json.dumps(args, sort_keys=True)
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if dedup and idempotency_key is not None:
                    prior = self._conn.execute(
                        "SELECT effect_id, result FROM ledger WHERE scope = ? AND "
                        "idempotency_key = ? AND outcome = 'committed' ORDER BY seq LIMIT 1",
                        (scope, idempotency_key),
                    ).fetchone()
                    if prior is not None:
                        self._conn.execute("ROLLBACK")
                        return CallOutcome(
                            tool, True, json.loads(prior[1]), effect_id=prior[0], replayed=True
                        )
                tx = Tx(self._conn, self.domain, self.meta)
                try:
                    key = intent(tx, args) if intent is not None else None  # the state before
                    result = fn(tx, **args)
                except DomainError as exc:
                    self._conn.execute("ROLLBACK")
                    return self._journal_rejection(
                        tool, args_text, scope, str(exc), idempotency_key, call_id
                    )
                changed = tx.flush()
                self._step("state_written")
                # the state this commit leaves (tau2's hash), read inside the same transaction:
                # the ledger alone says what the final state is (grading reads only the ledger)
                after = hashlib.sha256(self._canonical_locked().encode()).hexdigest()
                effect_id = self._append(
                    scope,
                    tool,
                    args_text,
                    "committed",
                    changed,
                    key,
                    after,
                    json.dumps(result, sort_keys=True),
                    None,
                    idempotency_key,
                    call_id,
                )
                self._step("ledger_written")
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        return CallOutcome(tool, True, result, effect_id=effect_id, changed=changed)

    def _journal_rejection(
        self,
        tool: str,
        args_text: str,
        scope: str,
        error: str,
        idempotency_key: str | None,
        call_id: str | None,
    ) -> CallOutcome:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            effect_id = self._append(
                scope,
                tool,
                args_text,
                "rejected",
                False,
                None,
                None,
                None,
                error,
                idempotency_key,
                call_id,
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return CallOutcome(tool, False, error=error, effect_id=effect_id)

    def _append(
        self,
        scope: str,
        tool: str,
        args_text: str,
        outcome: str,
        changed: bool,
        intent: str | None,
        state_after: str | None,
        result: str | None,
        error: str | None,
        idempotency_key: str | None,
        call_id: str | None,
    ) -> str:
        (seq,) = self._conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM ledger").fetchone()
        effect_id = f"eff-{seq:08d}"
        self._conn.execute(
            "INSERT INTO ledger(seq, effect_id, scope, tool, arguments, outcome, changed, intent,"
            " state_after, result, error, idempotency_key, call_id, committed_at_ns)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                seq,
                effect_id,
                scope,
                tool,
                args_text,
                outcome,
                int(changed),
                intent,
                state_after,
                result,
                error,
                idempotency_key,
                call_id,
                str(time.time_ns()),
            ),
        )
        return effect_id

    def _step(self, name: str) -> None:
        if self._hook is not None:
            self._hook(name)
