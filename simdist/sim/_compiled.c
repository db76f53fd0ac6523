/* A repeated sized alltoall, compiled: see _repeated.py.

   One object, ``Repeated``, holds what a call of Alltoallv or Alltoallw
   found the third time its arguments came (their template, the rows of
   both buffers, the communicator's words); calling it with the arguments
   of a later call does that call's whole work, as the Python path does
   it, step for step and word for word: the progress step's poll, the
   communicator's count of collectives, ``SimComm._exchange_sized`` with
   every block in its row (release, heads, rows, ``_meet``, rows back,
   ``_done``, ``_end``). It returns False where the arguments differ from
   what it holds, None where they do not but the state asks for the Python
   path (having changed nothing either way), True when the call is done,
   and (lengths received, longest block, a row's room) when a block's
   length or size needs the rest of the Python path.
   Every wait longer than the arena's spin, every sleeping peer to wake
   and every signature that differs goes back to the Python methods.

   A call whose blocks are longer than rows goes *streamed* where every
   member's call is compiled so (see ``stream``); where one is not, it goes
   the Python path's way, in phases. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DIMS 32
#define MAX_LEAVES 96
#define MAX_MEMBERS 64
#define MAX_DEPTH 3

enum { LEAF_SEQ = 1, LEAF_BUFFER, LEAF_INT, LEAF_NONE, LEAF_TYPE };

typedef struct {
    int kind;
    PyObject *a;     /* SEQ: its type; TYPE: the datatype's key */
    PyObject *b;     /* TYPE: the datatype class */
    Py_ssize_t n;    /* SEQ: its length; INT: its value */
} Leaf;

typedef struct {
    Leaf leaves[MAX_LEAVES];
    int nleaves;
    PyObject *type_maps;          /* the derived datatypes' maps, by handle (``_typecalls._MAPS``) */
    /* the buffer: an ndarray of this layout */
    PyTypeObject *array_type;
    int ndim;
    Py_ssize_t shape[MAX_DIMS], strides[MAX_DIMS], itemsize;
    char format[32];
    int writable;
    /* the rows: a copy of ``cdim`` loops, innermost runs of ``run`` bytes */
    Py_ssize_t offset;            /* of the rows' first byte from the buffer's data pointer */
    int cdim;
    Py_ssize_t cshape[MAX_DIMS], user_step[MAX_DIMS], arena_step[MAX_DIMS], run;
    Py_ssize_t arena_offset[2];   /* of the rows in the arena, per bank, in bytes */
    /* streamed: the blocks' runs of memory, (offset from the data pointer,
       length) pairs; block j's are runs first[j] to first[j + 1] */
    Py_ssize_t *runs;
    Py_ssize_t first[MAX_MEMBERS + 1];
} Side;

typedef struct {
    PyObject_HEAD
    Side side[2];
    int n;                        /* members */
    int64_t sizes[MAX_MEMBERS], expected[MAX_MEMBERS], longest_mine, room;
    int inline_call;
    long spin;
    Py_ssize_t calls;             /* the calls done here */
    int streamed, me;             /* streamed: the blocks through rings (``stream``); me: this member */
    Py_ssize_t frag, depth;       /* streamed: a fragment's bytes, the fragments a ring holds */
    int64_t yield_ns;             /* streamed: how long an idle rank yields before it waits in Python */
    Py_ssize_t events[2][MAX_MEMBERS];  /* streamed: per bank, each member's EVENTS word */
    PyObject *member_rank[MAX_MEMBERS];
    /* words of arena.q */
    Py_ssize_t polls, ring_head, ring_tail, ring_step, ring_n;
    Py_ssize_t seq_word[2], call_epoch[2], ctx_word, state_word, arrive, done, progress;
    Py_ssize_t sleepers_lo, sleepers_hi;
    Py_ssize_t my_sig[2], sig_words;
    int npeers;
    Py_ssize_t peer_call_epoch[2][MAX_MEMBERS], peer_sig[2][MAX_MEMBERS];
    PyObject *peer_rank[MAX_MEMBERS];
    Py_ssize_t my_heads[2], head_step, their_heads[2][MAX_MEMBERS];
    int64_t ctx, call_state, user_state;
    /* objects */
    PyObject *sc, *st, *engine, *mail, *arena, *q, *pending, *last_static, *static_sig;
    PyObject *peer_done, *peers, *peer_arrive, *flight_names;
} Repeated;

/* A streamed row, from its head's word: the stream token (the call's
   epoch, where the row's sender streams), the fragments written (by the
   sender) and read (by the receiver), each on a line of its own, then the
   ring of fragments. Word 3 of a member's row for itself counts what its
   peers published for it (``_repeated.EVENTS``: ``events``). A row of the
   Python path has only the first two words
   of the head (its length, the sender's longest block) and its bytes after
   the head's line (``_one_phase.SIZED_HEAD``). */
#define TOKEN 2
#define PRODUCED 8
#define CONSUMED 16
#define RING 24

static PyObject *s_epoch, *s_seq, *s_bank, *s_closed, *s_stash, *s_coll_seq, *s_id, *s_key, *s_committed, *s_made_as,
    *s_wait_word, *s_wait_words, *s_wake, *s_check;

static inline int64_t load(const int64_t *q, Py_ssize_t w) { return __atomic_load_n(q + w, __ATOMIC_ACQUIRE); }
static inline void store(int64_t *q, Py_ssize_t w, int64_t v) { __atomic_store_n(q + w, v, __ATOMIC_RELEASE); }
static inline void fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* -- reading the arguments back ------------------------------------------------ */

static int ints_of(PyObject *seq, Py_ssize_t *out, int most, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > most) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: %zd values, at most %d", what, n, most);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return (int)n;
}

/* What the parse keys a datatype by (``_argcache._type``): its map's first
   making (``made_as``) or its handle, if committed; a predefined one's
   ``_id``; NULL (no error set) for a freed or uncommitted one. */
static PyObject *datatype_key(const Side *side, PyObject *datatype)
{
    PyObject *id = PyObject_GetAttr(datatype, s_id);
    if (id == NULL)
        return NULL;
    PyObject *tm = PyDict_GetItemWithError(side->type_maps, id);  /* borrowed */
    if (tm == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(id);
            return NULL;
        }
        PyObject *key = PyObject_GetAttr(datatype, s_key);
        int predefined = key != NULL && PyObject_RichCompareBool(id, key, Py_EQ) > 0;
        Py_XDECREF(key);
        if (predefined)
            return id;
        Py_DECREF(id);
        return NULL;
    }
    int committed = 0;
    PyObject *flag = PyObject_GetAttr(tm, s_committed);
    if (flag != NULL) {
        committed = PyObject_IsTrue(flag) > 0;
        Py_DECREF(flag);
    }
    PyObject *made = committed ? PyObject_GetAttr(tm, s_made_as) : NULL;
    if (made == NULL) {
        Py_DECREF(id);
        return NULL;
    }
    if (made == Py_None) {
        Py_DECREF(made);
        return id;
    }
    Py_DECREF(id);
    return made;
}

/* Whether ``obj`` walks as ``leaves`` from ``*at`` on; the buffer's object in *buffer. */
static int matches(const Side *side, PyObject *obj, int *at, int depth, PyObject **buffer)
{
    if (*at >= side->nleaves)
        return 0;
    const Leaf *leaf = &side->leaves[(*at)++];
    switch (leaf->kind) {
    case LEAF_SEQ: {
        if ((PyObject *)Py_TYPE(obj) != leaf->a || depth >= MAX_DEPTH)
            return 0;
        Py_ssize_t n = PyList_Check(obj) ? PyList_GET_SIZE(obj) : PyTuple_GET_SIZE(obj);
        if (n != leaf->n)
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_Check(obj) ? PyList_GET_ITEM(obj, i) : PyTuple_GET_ITEM(obj, i);
            if (!matches(side, item, at, depth + 1, buffer))
                return 0;
        }
        return 1;
    }
    case LEAF_BUFFER:
        if (Py_TYPE(obj) != side->array_type)
            return 0;
        *buffer = obj;
        return 1;
    case LEAF_INT: {
        if (!PyLong_CheckExact(obj))
            return 0;
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        return !overflow && v == leaf->n;
    }
    case LEAF_NONE:
        return obj == Py_None;
    case LEAF_TYPE: {
        int is = PyObject_IsInstance(obj, leaf->b);
        if (is <= 0) {
            PyErr_Clear();
            return 0;
        }
        PyObject *key = datatype_key(side, obj);
        if (key == NULL) {
            PyErr_Clear();
            return 0;
        }
        int same = PyObject_RichCompareBool(key, leaf->a, Py_EQ);
        Py_DECREF(key);
        if (same < 0)
            PyErr_Clear();
        return same > 0;
    }
    }
    return 0;
}

/* The side's buffer of this call, exported into *view, if ``spec`` is the side's template. */
static int take_buffer(const Side *side, PyObject *spec, Py_buffer *view)
{
    int at = 0;
    PyObject *buffer = NULL;
    if (!matches(side, spec, &at, 0, &buffer) || at != side->nleaves || buffer == NULL)
        return 0;
    int flags = PyBUF_RECORDS_RO | (side->writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(buffer, view, flags) < 0) {
        PyErr_Clear();
        return 0;
    }
    int same = view->ndim == side->ndim && view->itemsize == side->itemsize && view->format != NULL
               && strcmp(view->format, side->format) == 0;
    for (int d = 0; same && d < side->ndim; d++)
        same = view->shape[d] == side->shape[d] && view->strides[d] == side->strides[d];
    if (!same) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* ``n`` runs of ``run`` bytes, ``sstep`` and ``dstep`` apart; a run of a
   fixed small size is one load and store (a column's elements). */
static inline void copy_runs(char *dst, Py_ssize_t dstep, const char *src, Py_ssize_t sstep, Py_ssize_t n,
                             Py_ssize_t run)
{
#define RUNS(SIZE) for (Py_ssize_t k = 0; k < n; k++) memcpy(dst + k * dstep, src + k * sstep, SIZE); break;
    switch (run) {
    case 1: RUNS(1)
    case 2: RUNS(2)
    case 4: RUNS(4)
    case 8: RUNS(8)
    case 16: RUNS(16)
    default: RUNS(run)
    }
#undef RUNS
}

/* Copy the rows between user memory and the arena, ``to_arena`` or back. */
static void copy_rows(const Side *side, char *user, char *arena, int to_arena)
{
    int cdim = side->cdim;
    if (cdim == 0) {
        if (to_arena)
            memcpy(arena, user, side->run);
        else
            memcpy(user, arena, side->run);
        return;
    }
    Py_ssize_t index[MAX_DIMS] = {0}, n = side->cshape[cdim - 1];
    Py_ssize_t ustep = side->user_step[cdim - 1], astep = side->arena_step[cdim - 1];
    for (;;) {
        Py_ssize_t u = 0, a = 0;
        for (int d = 0; d < cdim - 1; d++) {
            u += index[d] * side->user_step[d];
            a += index[d] * side->arena_step[d];
        }
        if (to_arena)
            copy_runs(arena + a, astep, user + u, ustep, n, side->run);
        else
            copy_runs(user + u, ustep, arena + a, astep, n, side->run);
        int d = cdim - 2;
        while (d >= 0 && ++index[d] == side->cshape[d])
            index[d--] = 0;
        if (d < 0)
            return;
    }
}

/* -- the call ------------------------------------------------------------------ */

static int truthy_attr(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

static int get_ssize(PyObject *obj, PyObject *name, Py_ssize_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_ssize(PyObject *obj, PyObject *name, Py_ssize_t value)
{
    PyObject *v = PyLong_FromSsize_t(value);
    if (v == NULL)
        return -1;
    int r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

/* Whether the state lets the compiled path run: the communicator open, no
   message in flight or waiting, the bank's signature this exchange's. */
static int state_allows(Repeated *self, const int64_t *q, Py_ssize_t *epoch)
{
    PyObject *closed = PyObject_GetAttr(self->sc, s_closed);
    if (closed == NULL)
        return -1;
    Py_DECREF(closed);
    if (closed != Py_None)
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(self->flight_names);
    for (Py_ssize_t i = 0; i < n; i++) {
        int t = truthy_attr(self->engine, PyTuple_GET_ITEM(self->flight_names, i));
        if (t != 0)
            return t < 0 ? -1 : 0;
    }
    int t = truthy_attr(self->mail, s_stash);
    if (t != 0)
        return t < 0 ? -1 : 0;
    for (Py_ssize_t k = 0; k < self->ring_n; k++)
        if (load(q, self->ring_head + k * self->ring_step) != load(q, self->ring_tail + k * self->ring_step))
            return 0;
    if (get_ssize(self->sc, s_epoch, epoch) < 0)
        return -1;
    PyObject *last = PyList_GetItem(self->last_static, (*epoch + 1) & 1);
    if (last == NULL)
        return -1;
    return last == self->static_sig ? 1 : self->streamed ? 2 : 0;  /* 2: a streamed call signs the bank */
}

/* ``_sign(static, bank, seq)``: the bank's signature made this exchange's, as ``_meet`` makes a new one. */
static int sign(Repeated *self, int bank)
{
    Py_ssize_t seq;
    if (get_ssize(self->sc, s_seq, &seq) < 0)
        return -1;
    PyObject *r = PyObject_CallMethod(self->sc, "_sign", "Oin", self->static_sig, bank, seq + 1);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int wake_sleepers(Repeated *self, const int64_t *q)
{
    for (Py_ssize_t w = self->sleepers_lo; w < self->sleepers_hi; w++) {
        if (load(q, w)) {
            PyObject *r = PyObject_CallMethodNoArgs(self->sc, s_wake);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
            return 0;
        }
    }
    return 0;
}

/* arena.<method>(first, epoch, who, True): a wait of the Python path. */
static int call_wait(Repeated *self, PyObject *method, PyObject *first, int64_t epoch, PyObject *who)
{
    PyObject *target = PyLong_FromLongLong(epoch), *r = NULL;
    if (target != NULL)
        r = PyObject_CallMethodObjArgs(self->arena, method, first, target, who, Py_True, NULL);
    Py_XDECREF(target);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* ``_release(bank)``: wait until the readers of this rank's half slot
   (pending: (their done words, the epoch, their ranks)) are done. */
static int release(Repeated *self, const int64_t *q, int bank)
{
    PyObject *readers = PyList_GetItem(self->pending, bank);
    if (readers == NULL)
        return -1;
    if (readers == Py_None)
        return 0;
    Py_INCREF(readers);
    int r = PyList_SetItem(self->pending, bank, Py_NewRef(Py_None));
    PyObject *words = r < 0 ? NULL : PySequence_Fast(PyTuple_GET_ITEM(readers, 0), "readers");
    int64_t want = words == NULL ? -1 : PyLong_AsLongLong(PyTuple_GET_ITEM(readers, 1));
    if (words == NULL || (want == -1 && PyErr_Occurred())) {
        r = -1;
    } else {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(words); i++) {
            if (load(q, PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(words, i))) < want) {
                r = call_wait(self, s_wait_words, PyTuple_GET_ITEM(readers, 0), want, PyTuple_GET_ITEM(readers, 2));
                break;
            }
        }
    }
    Py_XDECREF(words);
    Py_DECREF(readers);
    return r;
}

/* ``_meet``'s arrival and look at the peers, after this rank's part is
   written; ``*arrived`` becomes ``epoch`` once ``sc._epoch`` is (what
   ``_end`` stores, should the meeting raise). */
static int meet(Repeated *self, int64_t *q, int bank, int64_t epoch, int64_t *arrived)
{
    Py_ssize_t seq;
    if (set_ssize(self->sc, s_bank, bank) < 0 || get_ssize(self->sc, s_seq, &seq) < 0
        || set_ssize(self->sc, s_seq, seq + 1) < 0)
        return -1;
    store(q, self->seq_word[bank], seq + 1);  /* only the sequence number changes */
    store(q, self->call_epoch[bank], epoch);
    store(q, self->ctx_word, self->ctx);
    store(q, self->state_word, self->call_state);
    if (set_ssize(self->sc, s_epoch, epoch) < 0)
        return -1;
    *arrived = epoch;
    store(q, self->arrive, epoch);
    fence();
    if (wake_sleepers(self, q) < 0)
        return -1;
    const int64_t *mine = q + self->my_sig[bank];
    for (int i = 0; i < self->npeers; i++) {
        Py_ssize_t w = self->peer_call_epoch[bank][i];
        for (long k = 0; k < self->spin && load(q, w) < epoch; k++)
            relax();
        if (load(q, w) < epoch) {
            PyObject *word = PyLong_FromSsize_t(w);
            int r = word == NULL ? -1 : call_wait(self, s_wait_word, word, epoch, self->peer_rank[i]);
            Py_XDECREF(word);
            if (r < 0)
                return -1;
        }
        if (memcmp(mine, q + self->peer_sig[bank][i], self->sig_words * 8) != 0) {
            if (call_wait(self, s_wait_words, self->peer_arrive, epoch, self->peers) < 0)
                return -1;
            PyObject *nbytes = PyLong_FromSsize_t(self->sig_words * 8);
            PyObject *r = nbytes == NULL ? NULL : PyObject_CallMethodOneArg(self->sc, s_check, nbytes);
            Py_XDECREF(nbytes);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
            return 0;
        }
    }
    return 0;
}

/* ``_end``: this rank reads nothing more of the call. */
static void end(Repeated *self, int64_t *q, int64_t epoch)
{
    store(q, self->done, epoch);
    store(q, self->progress, load(q, self->progress) + 1);
    store(q, self->state_word, self->user_state);
}

/* ``_done(bank)``: the members may write their half slots again once this rank's readers are done. */
static int done(Repeated *self, int64_t *q, int bank, int64_t epoch)
{
    store(q, self->done, epoch);
    fence();
    if (wake_sleepers(self, q) < 0)
        return -1;
    PyObject *target = PyLong_FromLongLong(epoch);
    PyObject *readers = target == NULL ? NULL : PyTuple_Pack(3, self->peer_done, target, self->peers);
    Py_XDECREF(target);
    if (readers == NULL)
        return -1;
    return PyList_SetItem(self->pending, bank, readers);  /* steals readers */
}

static int bump(PyObject *obj, PyObject *name)
{
    Py_ssize_t v;
    return get_ssize(obj, name, &v) < 0 ? -1 : set_ssize(obj, name, v + 1);
}

/* -- streamed -------------------------------------------------------------------- */

/* Where a block's bytes stand in its runs of memory. */
typedef struct {
    char *base;
    const Py_ssize_t *runs;
    Py_ssize_t at, end, pos;   /* the run, one past the last, the byte in the run */
} Cursor;

static void cursor_at(Cursor *c, char *base, const Side *side, int j)
{
    c->base = base;
    c->runs = side->runs;
    c->at = side->first[j];
    c->end = side->first[j + 1];
    c->pos = 0;
}

/* Move the block's next ``n`` bytes into ``packed`` (``gather``) or out of it. */
static void cursor_move(Cursor *c, char *packed, Py_ssize_t n, int gather)
{
    while (n > 0 && c->at < c->end) {
        Py_ssize_t len = c->runs[2 * c->at + 1], m = len - c->pos;
        m = m < n ? m : n;
        char *mem = c->base + c->runs[2 * c->at] + c->pos;
        if (gather)
            memcpy(packed, mem, m);
        else
            memcpy(mem, packed, m);
        packed += m;
        n -= m;
        if ((c->pos += m) == len) {
            c->at++;
            c->pos = 0;
        }
    }
}

/* A rank's block to itself: run by run, from one side's runs to the other's. */
static void cursor_copy(Cursor *to, Cursor *from)
{
    while (to->at < to->end && from->at < from->end) {
        Py_ssize_t a = to->runs[2 * to->at + 1] - to->pos, b = from->runs[2 * from->at + 1] - from->pos;
        Py_ssize_t m = a < b ? a : b;
        memcpy(to->base + to->runs[2 * to->at] + to->pos, from->base + from->runs[2 * from->at] + from->pos, m);
        if ((to->pos += m) == to->runs[2 * to->at + 1]) {
            to->at++;
            to->pos = 0;
        }
        if ((from->pos += m) == from->runs[2 * from->at + 1]) {
            from->at++;
            from->pos = 0;
        }
    }
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The blocks of a streamed call, once every member's head said it streams:
   each block goes in fragments of ``frag`` bytes through a ring of ``depth``
   in its sender's row for the receiver, the sender counting what it wrote
   (PRODUCED), the receiver what it read (CONSUMED); a rank writes and reads
   whatever its rings allow, round its peers, so a block never waits for a
   whole other one, and its copies stay small enough for the caches (at
   2 and 4 ranks faster than one copy of the whole block each way). A rank
   that receives what it does not expect (``accept`` false) reads its
   fragments and drops them. A rank that writes or reads a peer's counter
   adds one to that peer's EVENTS word; an idle rank spins, yields, then
   waits in Python until its own EVENTS word passes what it was before the
   rank last looked at its rings, so any news wakes it, and hang reports,
   the deadlock check and aborts see an exact wait as any other. */
static int stream(Repeated *self, int64_t *q, char *arena, int bank, char *send, char *recv, const int64_t *got,
                  int accept)
{
    int n = self->n, me = self->me;
    Py_ssize_t frag = self->frag, depth = self->depth;
    Cursor out[MAX_MEMBERS], in[MAX_MEMBERS];
    int64_t sent[MAX_MEMBERS], sends[MAX_MEMBERS], taken[MAX_MEMBERS], takes[MAX_MEMBERS];
    for (int j = 0; j < n; j++) {  /* a cursor stops at its block's end: the last fragment is the rest */
        cursor_at(&out[j], send, &self->side[0], j);
        cursor_at(&in[j], recv, &self->side[1], j);
        sent[j] = taken[j] = 0;
        sends[j] = j == me ? 0 : (self->sizes[j] + frag - 1) / frag;
        takes[j] = j == me ? 0 : (got[j] + frag - 1) / frag;
    }
    if (accept)
        cursor_copy(&in[me], &out[me]);
    Py_ssize_t mine = self->my_heads[bank], news = self->events[bank][me];
    const Py_ssize_t *events = self->events[bank];
    long idle = 0;
    int64_t since = 0;
    for (;;) {
        int moved = 0, busy = 0, wait_on = -1;
        int64_t seen = __atomic_load_n(q + news, __ATOMIC_SEQ_CST);  /* before the rings: news after it wakes */
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n, i = (me - k + n) % n;
            Py_ssize_t to = mine + j * self->head_step, from = self->their_heads[bank][i];
            while (sent[j] < sends[j] && sent[j] - load(q, to + CONSUMED) < depth) {
                cursor_move(&out[j], arena + (to + RING) * 8 + (sent[j] % depth) * frag, frag, 1);
                store(q, to + PRODUCED, ++sent[j]);
                __atomic_fetch_add(q + events[j], 1, __ATOMIC_SEQ_CST);
                moved = 1;
            }
            while (taken[i] < takes[i] && load(q, from + PRODUCED) > taken[i]) {
                if (accept)
                    cursor_move(&in[i], arena + (from + RING) * 8 + (taken[i] % depth) * frag, frag, 0);
                store(q, from + CONSUMED, ++taken[i]);
                __atomic_fetch_add(q + events[i], 1, __ATOMIC_SEQ_CST);
                moved = 1;
            }
            if (wait_on < 0 && taken[i] < takes[i])
                wait_on = i;  /* the peer reported as waited for */
            else if (wait_on < 0 && sent[j] < sends[j])
                wait_on = j;
            busy = busy || sent[j] < sends[j] || taken[i] < takes[i];
        }
        if (moved) {  /* _publish's fence and wake, once for the round */
            fence();
            if (wake_sleepers(self, q) < 0)
                return -1;
            idle = 0;
            continue;
        }
        if (!busy)
            return 0;
        if (idle < self->spin) {
            idle++;
            relax();
            continue;
        }
        if (idle++ == self->spin)
            since = now_ns();
        if (now_ns() - since < self->yield_ns) {
            sched_yield();
            continue;
        }
        PyObject *word = PyLong_FromSsize_t(news);
        int r = word == NULL ? -1 : call_wait(self, s_wait_word, word, seen + 1, self->member_rank[wait_on]);
        Py_XDECREF(word);
        if (r < 0)
            return -1;
        idle = 0;
    }
}

/* The exchange itself, once both buffers are exported and the state allows
   it (``unsigned_bank``: once its bank is signed for it). A streamed call
   has heads that say so (the stream token, and a longest block past a row,
   so that a member whose call is not streamed goes in phases) and moves
   the blocks by ``stream`` if every member streams, else leaves them to the
   Python path's phases; a call of rows moves them through its rows. */
static PyObject *exchange(Repeated *self, int64_t *q, char *base, char *send, char *recv, Py_ssize_t epoch0,
                          int unsigned_bank)
{
    int bank = (int)((epoch0 + 1) & 1);
    int64_t epoch = epoch0 + 1;
    store(q, self->polls, load(q, self->polls) + 1);   /* the progress step's poll */
    if (bump(self->st, s_coll_seq) < 0)               /* Counted: the call's number */
        return NULL;
    if (!self->inline_call && release(self, q, bank) < 0)
        return NULL;
    if (unsigned_bank && sign(self, bank) < 0)
        return NULL;
    Py_ssize_t word = self->my_heads[bank];
    for (int j = 0; j < self->n; j++, word += self->head_step) {
        store(q, word, self->sizes[j]);
        store(q, word + 1, self->longest_mine);
        store(q, word + TOKEN, self->streamed ? epoch : 0);
        if (self->streamed) {
            store(q, word + PRODUCED, 0);
            store(q, word + CONSUMED, 0);
        }
    }
    if (self->streamed)
        store(q, self->events[bank][self->me], 0);
    if (!self->streamed)
        copy_rows(&self->side[0], send, base + self->side[0].arena_offset[bank], 1);
    int64_t arrived = epoch0;
    if (meet(self, q, bank, epoch, &arrived) < 0) {
        end(self, q, arrived);
        return NULL;
    }
    int64_t got[MAX_MEMBERS], longest = 0;
    int same = 1, all = 1;
    for (int j = 0; j < self->n; j++) {
        Py_ssize_t head = self->their_heads[bank][j];
        got[j] = load(q, head);
        int64_t l = load(q, head + 1);
        longest = l > longest ? l : longest;
        same = same && got[j] == self->expected[j];
        all = all && load(q, head + TOKEN) == epoch;
    }
    int whole;  /* every block moved */
    if (self->streamed) {
        if (all && stream(self, q, base, bank, send, recv, got, same) < 0) {
            end(self, q, epoch);
            return NULL;
        }
        whole = all && same;
        if (all)  /* nothing left for phases: a length that differs raises in the rest */
            longest = 0;
    } else {
        whole = longest <= self->room && same;
        if (whole)
            copy_rows(&self->side[1], recv, base + self->side[1].arena_offset[bank], 0);
    }
    if (!self->inline_call && done(self, q, bank, epoch) < 0) {
        end(self, q, epoch);
        return NULL;
    }
    end(self, q, epoch);
    self->calls++;
    if (whole)
        Py_RETURN_TRUE;
    PyObject *lengths = PyList_New(self->n);
    if (lengths == NULL)
        return NULL;
    for (int j = 0; j < self->n; j++) {
        PyObject *v = PyLong_FromLongLong(got[j]);
        if (v == NULL) {
            Py_DECREF(lengths);
            return NULL;
        }
        PyList_SET_ITEM(lengths, j, v);
    }
    return Py_BuildValue("(NLL)", lengths, (long long)longest, (long long)self->room);
}

static PyObject *Repeated_call(Repeated *self, PyObject *args, PyObject *kwargs)
{
    PyObject *sendspec, *recvspec;
    if (!PyArg_ParseTuple(args, "OO", &sendspec, &recvspec))
        return NULL;
    Py_buffer send, recv, arena;
    if (self->sc == NULL)
        Py_RETURN_FALSE;
    if (!take_buffer(&self->side[0], sendspec, &send))
        Py_RETURN_FALSE;
    if (!take_buffer(&self->side[1], recvspec, &recv)) {
        PyBuffer_Release(&send);
        Py_RETURN_FALSE;
    }
    PyObject *out;
    if (PyObject_GetBuffer(self->q, &arena, PyBUF_CONTIG) < 0) {
        PyErr_Clear();  /* the arena is gone: the Python path says why */
        out = Py_NewRef(Py_False);
    } else {
        int64_t *q = (int64_t *)arena.buf;
        Py_ssize_t epoch;
        int allowed = state_allows(self, q, &epoch);
        if (allowed < 0)
            out = NULL;
        else if (!allowed)  /* the arguments are this call's, the state is not: the Python path */
            out = Py_NewRef(Py_None);
        else
            out = exchange(self, q, (char *)arena.buf, (char *)send.buf + self->side[0].offset,
                           (char *)recv.buf + self->side[1].offset, epoch, allowed == 2);
        PyBuffer_Release(&arena);
    }
    PyBuffer_Release(&send);
    PyBuffer_Release(&recv);
    return out;
}

/* -- making one ------------------------------------------------------------------ */

static PyObject *item(PyObject *dict, const char *key)
{
    PyObject *v = PyDict_GetItemString(dict, key);  /* borrowed */
    if (v == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_KeyError, "Repeated: no %s", key);
    return v;
}

static int ssize_item(PyObject *dict, const char *key, Py_ssize_t *out)
{
    PyObject *v = item(dict, key);
    if (v == NULL)
        return -1;
    *out = PyLong_AsSsize_t(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int ints_item(PyObject *dict, const char *key, Py_ssize_t *out, int most)
{
    PyObject *v = item(dict, key);
    return v == NULL ? -1 : ints_of(v, out, most, key);
}

static int int64s_item(PyObject *dict, const char *key, int64_t *out, int most)
{
    Py_ssize_t tmp[MAX_MEMBERS];
    int n = ints_item(dict, key, tmp, most);
    for (int i = 0; i < n; i++)
        out[i] = tmp[i];
    return n;
}

static int obj_item(PyObject *dict, const char *key, PyObject **out)
{
    PyObject *v = item(dict, key);
    if (v == NULL)
        return -1;
    Py_INCREF(v);
    *out = v;
    return 0;
}

/* A streamed side: its blocks' runs (a flat list of offset, length pairs) and where each block's start. */
static int init_runs(Side *side, PyObject *dict)
{
    PyObject *runs = PySequence_Fast(item(dict, "runs"), "runs");
    if (runs == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(runs);
    side->runs = PyMem_Malloc((n ? n : 1) * sizeof(Py_ssize_t));
    if (side->runs == NULL) {
        Py_DECREF(runs);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        side->runs[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(runs, i));
        if (side->runs[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(runs);
            return -1;
        }
    }
    Py_DECREF(runs);
    side->offset = 0;
    return ints_item(dict, "first", side->first, MAX_MEMBERS + 1) < 0 ? -1 : 0;
}

static int init_side(Side *side, PyObject *dict)
{
    PyObject *leaves = item(dict, "leaves"), *format = item(dict, "format"), *type = item(dict, "array_type");
    PyObject *maps = item(dict, "type_maps");
    if (leaves == NULL || format == NULL || type == NULL || maps == NULL)
        return -1;
    if (!PyDict_Check(maps)) {
        PyErr_SetString(PyExc_TypeError, "Repeated: type_maps must be a dict");
        return -1;
    }
    Py_INCREF(maps);
    side->type_maps = maps;
    if (!PyList_Check(leaves) || PyList_GET_SIZE(leaves) > MAX_LEAVES) {
        PyErr_SetString(PyExc_ValueError, "Repeated: leaves must be a list of at most 96");
        return -1;
    }
    side->nleaves = (int)PyList_GET_SIZE(leaves);
    for (int i = 0; i < side->nleaves; i++) {
        Leaf *leaf = &side->leaves[i];
        PyObject *a, *b;
        long long n;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(leaves, i), "iOOL", &leaf->kind, &a, &b, &n))
            return -1;
        leaf->n = (Py_ssize_t)n;
        leaf->a = a == Py_None ? NULL : a;
        if (leaf->kind == LEAF_TYPE && (leaf->a == NULL || b == Py_None)) {
            PyErr_SetString(PyExc_ValueError, "Repeated: a datatype leaf needs its key and class");
            return -1;
        }
        leaf->b = b == Py_None ? NULL : b;
        Py_XINCREF(leaf->a);
        Py_XINCREF(leaf->b);
    }
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "Repeated: array_type must be a type");
        return -1;
    }
    Py_INCREF(type);
    side->array_type = (PyTypeObject *)type;
    const char *f = PyUnicode_AsUTF8(format);
    if (f == NULL || strlen(f) >= sizeof side->format) {
        PyErr_SetString(PyExc_ValueError, "Repeated: format too long");
        return -1;
    }
    strcpy(side->format, f);
    Py_ssize_t writable, offsets[2];
    int ndim = ints_item(dict, "shape", side->shape, MAX_DIMS);
    if (ndim < 0 || ints_item(dict, "strides", side->strides, MAX_DIMS) != ndim
        || ssize_item(dict, "itemsize", &side->itemsize) < 0 || ssize_item(dict, "writable", &writable) < 0)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: strides"), -1);
    side->ndim = ndim;
    side->writable = (int)writable;
    if (PyDict_GetItemString(dict, "runs") != NULL)
        return init_runs(side, dict);
    if (ssize_item(dict, "offset", &side->offset) < 0 || ssize_item(dict, "run", &side->run) < 0
        || ints_item(dict, "arena_offset", offsets, 2) != 2)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: rows"), -1);
    side->arena_offset[0] = offsets[0];
    side->arena_offset[1] = offsets[1];
    int cdim = ints_item(dict, "loops", side->cshape, MAX_DIMS);
    if (cdim < 0 || ints_item(dict, "user_steps", side->user_step, MAX_DIMS) != cdim
        || ints_item(dict, "arena_steps", side->arena_step, MAX_DIMS) != cdim)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: loops"), -1);
    side->cdim = cdim;
    return 0;
}

static int Repeated_init(Repeated *self, PyObject *args, PyObject *kwargs)
{
    PyObject *d, *send, *recv;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyDict_Type, &send, &PyDict_Type, &recv, &PyDict_Type, &d))
        return -1;
    if (init_side(&self->side[0], send) < 0 || init_side(&self->side[1], recv) < 0)
        return -1;
    Py_ssize_t flag, spin, two[2], ctx, call, user;
    int n = int64s_item(d, "sizes", self->sizes, MAX_MEMBERS);
    if (n < 1 || int64s_item(d, "expected", self->expected, MAX_MEMBERS) != n)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: sizes"), -1);
    self->n = n;
    Py_ssize_t longest, room;
    if (ssize_item(d, "longest", &longest) < 0 || ssize_item(d, "room", &room) < 0
        || ssize_item(d, "inline", &flag) < 0 || ssize_item(d, "spin", &spin) < 0
        || ssize_item(d, "polls", &self->polls) < 0 || ssize_item(d, "ring_head", &self->ring_head) < 0
        || ssize_item(d, "ring_tail", &self->ring_tail) < 0 || ssize_item(d, "ring_step", &self->ring_step) < 0
        || ssize_item(d, "ring_n", &self->ring_n) < 0
        || ints_item(d, "seq_word", self->seq_word, 2) != 2 || ints_item(d, "call_epoch", self->call_epoch, 2) != 2
        || ssize_item(d, "ctx_word", &self->ctx_word) < 0 || ssize_item(d, "state_word", &self->state_word) < 0
        || ssize_item(d, "arrive", &self->arrive) < 0 || ssize_item(d, "done", &self->done) < 0
        || ssize_item(d, "progress", &self->progress) < 0 || ints_item(d, "sleepers", two, 2) != 2
        || ints_item(d, "my_sig", self->my_sig, 2) != 2 || ssize_item(d, "sig_words", &self->sig_words) < 0
        || ints_item(d, "my_heads", self->my_heads, 2) != 2 || ssize_item(d, "head_step", &self->head_step) < 0
        || ssize_item(d, "ctx", &ctx) < 0 || ssize_item(d, "call_state", &call) < 0
        || ssize_item(d, "user_state", &user) < 0)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: words"), -1);
    self->longest_mine = longest;
    self->room = room;
    self->inline_call = (int)flag;
    self->spin = (long)spin;
    self->sleepers_lo = two[0];
    self->sleepers_hi = two[1];
    self->ctx = ctx;
    self->call_state = call;
    self->user_state = user;
    int p = ints_item(d, "peer_call_epoch_0", self->peer_call_epoch[0], MAX_MEMBERS);
    if (p < 0 || ints_item(d, "peer_call_epoch_1", self->peer_call_epoch[1], MAX_MEMBERS) != p
        || ints_item(d, "peer_sig_0", self->peer_sig[0], MAX_MEMBERS) != p
        || ints_item(d, "peer_sig_1", self->peer_sig[1], MAX_MEMBERS) != p
        || ints_item(d, "their_heads_0", self->their_heads[0], MAX_MEMBERS) != n
        || ints_item(d, "their_heads_1", self->their_heads[1], MAX_MEMBERS) != n)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: peers"), -1);
    self->npeers = p;
    Py_ssize_t streamed, me, yield_ns;
    if (ssize_item(d, "streamed", &streamed) < 0 || ssize_item(d, "me", &me) < 0
        || ssize_item(d, "frag", &self->frag) < 0 || ssize_item(d, "depth", &self->depth) < 0
        || ssize_item(d, "yield_ns", &yield_ns) < 0)
        return -1;
    self->streamed = (int)streamed;
    self->me = (int)me;
    if (ints_item(d, "events_0", self->events[0], MAX_MEMBERS) != n
        || ints_item(d, "events_1", self->events[1], MAX_MEMBERS) != n)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: events"), -1);
    self->yield_ns = yield_ns;
    if (self->streamed && (self->side[0].runs == NULL || self->side[1].runs == NULL || self->frag <= 0
                           || self->depth <= 0)) {
        PyErr_SetString(PyExc_ValueError, "Repeated: a streamed call needs both sides' runs, a fragment and a depth");
        return -1;
    }
    PyObject *members = item(d, "members");
    if (members == NULL || !PyList_Check(members) || PyList_GET_SIZE(members) != n)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: members"), -1);
    for (int i = 0; i < n; i++)
        self->member_rank[i] = Py_NewRef(PyList_GET_ITEM(members, i));
    PyObject *ranks = item(d, "peers");
    if (ranks == NULL || !PyList_Check(ranks) || PyList_GET_SIZE(ranks) != p)
        return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "Repeated: peers"), -1);
    for (int i = 0; i < p; i++) {
        self->peer_rank[i] = PyList_GET_ITEM(ranks, i);
        Py_INCREF(self->peer_rank[i]);
    }
    if (obj_item(d, "sc", &self->sc) < 0 || obj_item(d, "st", &self->st) < 0
        || obj_item(d, "engine", &self->engine) < 0 || obj_item(d, "mail", &self->mail) < 0
        || obj_item(d, "arena", &self->arena) < 0 || obj_item(d, "q", &self->q) < 0
        || obj_item(d, "pending", &self->pending) < 0 || obj_item(d, "last_static", &self->last_static) < 0
        || obj_item(d, "static", &self->static_sig) < 0 || obj_item(d, "peer_done", &self->peer_done) < 0
        || obj_item(d, "peers", &self->peers) < 0 || obj_item(d, "peer_arrive", &self->peer_arrive) < 0
        || obj_item(d, "flight_names", &self->flight_names) < 0)
        return -1;
    if (!PyList_Check(self->pending) || PyList_GET_SIZE(self->pending) != 2 || !PyList_Check(self->last_static)
        || PyList_GET_SIZE(self->last_static) != 2 || !PyTuple_Check(self->flight_names)) {
        PyErr_SetString(PyExc_TypeError, "Repeated: pending and last_static are lists of 2, flight_names a tuple");
        return -1;
    }
    return 0;
}

#define OBJECTS(X) X(sc) X(st) X(engine) X(mail) X(arena) X(q) X(pending) X(last_static) X(static_sig) \
    X(peer_done) X(peers) X(peer_arrive) X(flight_names)

static int Repeated_traverse(Repeated *self, visitproc visit, void *arg)
{
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < self->side[k].nleaves; i++) {
            Py_VISIT(self->side[k].leaves[i].a);
            Py_VISIT(self->side[k].leaves[i].b);
        }
        Py_VISIT(self->side[k].array_type);
        Py_VISIT(self->side[k].type_maps);
    }
    for (int i = 0; i < self->npeers; i++)
        Py_VISIT(self->peer_rank[i]);
    for (int i = 0; i < self->n; i++)
        Py_VISIT(self->member_rank[i]);
#define VISIT(name) Py_VISIT(self->name);
    OBJECTS(VISIT)
    return 0;
}

/* Drop every object: a cleared one answers False to every call. */
static int Repeated_clear(Repeated *self)
{
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < self->side[k].nleaves; i++) {
            Py_CLEAR(self->side[k].leaves[i].a);
            Py_CLEAR(self->side[k].leaves[i].b);
        }
        self->side[k].nleaves = 0;
        Py_CLEAR(self->side[k].array_type);
        Py_CLEAR(self->side[k].type_maps);
    }
    for (int i = 0; i < self->npeers; i++)
        Py_CLEAR(self->peer_rank[i]);
    self->npeers = 0;
    for (int i = 0; i < self->n; i++)
        Py_CLEAR(self->member_rank[i]);
    self->n = 0;
#define CLEAR(name) Py_CLEAR(self->name);
    OBJECTS(CLEAR)
    return 0;
}

static void Repeated_dealloc(Repeated *self)
{
    PyObject_GC_UnTrack(self);
    Repeated_clear(self);
    for (int k = 0; k < 2; k++)
        PyMem_Free(self->side[k].runs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Repeated_members[] = {
    {"calls", T_PYSSIZET, offsetof(Repeated, calls), READONLY, "the calls done by the compiled path"},
    {NULL},
};

static PyTypeObject RepeatedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simdist.sim._compiled.Repeated",
    .tp_doc = "A repeated sized alltoall: call with (sendbuf, recvbuf); False if not this call.",
    .tp_basicsize = sizeof(Repeated),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Repeated_traverse,
    .tp_clear = (inquiry)Repeated_clear,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Repeated_init,
    .tp_dealloc = (destructor)Repeated_dealloc,
    .tp_call = (ternaryfunc)Repeated_call,
    .tp_members = Repeated_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "simdist.sim._compiled", "A repeated sized alltoall, compiled (see _repeated.py).", -1,
};

PyMODINIT_FUNC PyInit__compiled(void)
{
    if (PyType_Ready(&RepeatedType) < 0)
        return NULL;
    struct { PyObject **slot; const char *name; } names[] = {
        {&s_epoch, "_epoch"}, {&s_seq, "_seq"}, {&s_bank, "_bank"}, {&s_closed, "_closed"},
        {&s_stash, "_stash"}, {&s_coll_seq, "coll_seq"}, {&s_id, "_id"}, {&s_key, "_key"}, {&s_committed, "committed"},
        {&s_made_as, "made_as"}, {&s_wait_word, "wait_word"},
        {&s_wait_words, "wait_words"}, {&s_wake, "_wake_sleeping_peers"}, {&s_check, "_check"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL)
            return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RepeatedType);
    if (PyModule_AddObject(m, "Repeated", (PyObject *)&RepeatedType) < 0) {
        Py_DECREF(&RepeatedType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
