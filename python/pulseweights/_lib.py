# SPDX-License-Identifier: Apache-2.0
"""Loads libpulseweights with ctypes and declares the C structs and prototypes the package uses."""
import ctypes
import ctypes.util
import glob
import errno
import os

from ._version import LIBDIR, VERSION, source_root

# The C enum pulse_err (include/pulseweights/error.h): append only, never renumbered.
ERROR_NAMES = {
    -1: "PULSE_ERR_INVALID", -2: "PULSE_ERR_NOMEM", -3: "PULSE_ERR_IO", -4: "PULSE_ERR_FORMAT",
    -5: "PULSE_ERR_CORRUPT", -6: "PULSE_ERR_MISMATCH", -7: "PULSE_ERR_LIMIT", -8: "PULSE_ERR_NOTFOUND",
    -9: "PULSE_ERR_EXISTS", -10: "PULSE_ERR_AUTH", -11: "PULSE_ERR_NETWORK", -12: "PULSE_ERR_SERVER",
    -13: "PULSE_ERR_UNSUPPORTED", -14: "PULSE_ERR_NOT_MODIFIED", -15: "PULSE_ERR_PRECONDITION",
}

MAX_DIMS = 8          # PULSE_MAX_DIMS
INDEX_MAX_KEY = 512   # PULSE_INDEX_MAX_KEY
CKPT_READ, CKPT_WRITE = 0, 1
PUBLISH_KEYFRAME = 1
VALUES_ABS, VALUES_ULP = 0, 1
RECORD_SYNC_PATCH, RECORD_KEYFRAME = 1, 2


class Closeable:
    """A handle owner: close() frees it (once); also a context manager, and closed when collected."""

    def close(self):
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PulseError(Exception):
    """A libpulseweights call failed: .code is the negative PULSE_ERR_* value, .name its name,
    str() the library's detail (pulse_last_error) after the code's text."""

    def __init__(self, code, message):
        self.code = code
        self.name = ERROR_NAMES.get(code, "PULSE_ERR_%d" % code)
        super().__init__(message)


class PulseNotFound(PulseError, FileNotFoundError):
    """A file the call needs (a key, a trust file, a checkpoint) does not exist: both a
    PulseError (PULSE_ERR_NOTFOUND) and a FileNotFoundError (.filename, errno ENOENT)."""

    def __init__(self, what, filename):
        self.code = -8
        self.name = ERROR_NAMES[-8]
        FileNotFoundError.__init__(self, errno.ENOENT, what, os.fsdecode(filename))


def need_file(path, what):
    """Raises PulseNotFound when PATH does not exist (checked before the library is called)."""
    if path is None or not os.path.exists(path):
        raise PulseNotFound(what + " not found", path if path is not None else "")


def _candidates():
    """Where to look, in order: $PULSE_LIB; the installed library (its soname through the dynamic
    loader's own search, the libdir meson installed it to, find_library); the build directories
    of the checkout this package sits in (development)."""
    env = os.environ.get("PULSE_LIB")
    if env:
        return [env]   # named explicitly: no silent fallback to another build
    # meson's default soversion: the first component of the project version.
    soname = "libpulseweights.so.%s" % VERSION.split(".")[0]
    found = [soname]   # the dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache, /usr/lib...
    if LIBDIR:
        found.append(os.path.join(LIBDIR, soname))   # where meson installed it (before ldconfig ran)
    system = ctypes.util.find_library("pulseweights")
    if system:
        found.append(system)
    repo = source_root()
    if repo:
        builds = glob.glob(os.path.join(repo, "build*", "libpulseweights.so"))
        builds.sort(key=lambda p: (os.path.basename(os.path.dirname(p)) != "build", -os.path.getmtime(p)))
        found += builds
    return found


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _loaded_path(handle, fallback):
    """The file the dynamic loader actually mapped (a soname resolves to a full path)."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if dladdr(ctypes.cast(handle.pulse_strerror, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.path.abspath(os.fsdecode(info.dli_fname))
    except (AttributeError, OSError):
        pass
    return fallback


def _load():
    tried = []
    for path in _candidates():
        if "/" in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        return handle, _loaded_path(handle, path)
    raise ImportError("libpulseweights not found: set PULSE_LIB to the path of libpulseweights.so, or "
                      "install it (meson install; LD_LIBRARY_PATH for a non-standard libdir) "
                      "(tried: %s)" % ", ".join(tried or ["nothing"]))


lib, lib_path = _load()

c_u64 = ctypes.c_uint64
c_str = ctypes.c_char_p
c_void = ctypes.c_void_p
c_size = ctypes.c_size_t
c_int = ctypes.c_int


class MemTensor(ctypes.Structure):
    """pulse_mem_tensor (checkpoint.h)."""
    _fields_ = [("name", c_str), ("dtype_name", c_str), ("ndim", c_int), ("shape", c_u64 * MAX_DIMS),
                ("data", c_void), ("nbytes", c_u64)]


class LocoTensor(ctypes.Structure):
    """pulse_loco_tensor (loco.h)."""
    _fields_ = [("name", c_str), ("ndim", c_int), ("shape", c_u64 * MAX_DIMS), ("data", c_void)]


class SyncStep(ctypes.Structure):
    """pulse_sync_step (sync.h)."""
    _fields_ = [("step", c_u64), ("kind", c_int), ("base", ctypes.c_uint8 * 32), ("result", ctypes.c_uint8 * 32),
                ("changes", c_u64), ("dense_bytes", c_u64), ("object_bytes", c_u64), ("moved_bytes", c_u64),
                ("already", c_int), ("record_key", ctypes.c_char * (INDEX_MAX_KEY + 1))]


# Options structs carry their own size and only ever grow at the end: each is declared here up
# to the fields the package sets, followed by room for fields appended later, which keep the
# values the library's *_default function gave them. _check_size refuses a library whose struct
# outgrew that room.
_TAIL = 1024


class PublishOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("store_url", c_str), ("run", c_str), ("key_path", c_str),
                ("state_dir", c_str), ("values", c_int), ("threads", c_int), ("zstd_level", c_int),
                ("durable", c_int), ("on_progress", c_void), ("progress_ctx", c_void), ("chunk_elems", ctypes.c_uint32),
                ("context", c_int), ("part", ctypes.c_uint32), ("parts", ctypes.c_uint32),
                ("_tail", ctypes.c_uint8 * _TAIL)]


ON_STEP = ctypes.CFUNCTYPE(c_int, c_void, ctypes.POINTER(SyncStep))


class FollowOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("store_url", c_str), ("run", c_str), ("trust", c_void),
                ("state_dir", c_str), ("weights_path", c_str), ("threads", c_int), ("on_step", ON_STEP),
                ("ctx", c_void), ("weights", c_void), ("durable", c_int), ("_tail", ctypes.c_uint8 * _TAIL)]


class LocoRoundOpts(ctypes.Structure):
    _fields_ = [("size", c_size), ("store_url", c_str), ("run", c_str), ("key_path", c_str),
                ("state_dir", c_str), ("trust_paths", ctypes.POINTER(c_str)), ("n_trust", c_size),
                ("local_path", c_str), ("out_path", c_str), ("out_view_path", c_str),
                ("deadline_s", ctypes.c_double), ("quorum", ctypes.c_uint), ("outer_lr", ctypes.c_float),
                ("momentum", ctypes.c_float), ("nesterov", c_int), ("threads", c_int), ("verbose", c_int),
                ("shard_elems", ctypes.c_uint32), ("local_tensors", c_void), ("n_local", c_size),
                ("out_tensors", c_void), ("n_out", c_size), ("bf16_values", c_int),
                ("_tail", ctypes.c_uint8 * _TAIL)]


class LocoReport(ctypes.Structure):
    _fields_ = [("round", c_u64), ("params", c_u64), ("sent", c_u64), ("shard_bytes", c_u64),
                ("uploaded", c_u64), ("downloaded", c_u64), ("trainers", ctypes.c_uint),
                ("included", ctypes.c_uint), ("self_included", c_int), ("excluded", ctypes.c_uint),
                ("results_compared", ctypes.c_uint), ("results_mismatched", ctypes.c_uint),
                ("adopted", c_int), ("base", ctypes.c_uint8 * 32), ("result", ctypes.c_uint8 * 32),
                ("_tail", ctypes.c_uint8 * 256)]


class PatchTensorInfo(ctypes.Structure):
    """pulse_patch_tensor_info (patch.h)."""
    _fields_ = [("name", c_str), ("dtype_name", c_str), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_u64 * MAX_DIMS), ("nelems", c_u64), ("changes", c_u64), ("chunks", c_u64),
                ("coded_chunks", c_u64), ("pos_bytes", c_u64), ("val_bytes", c_u64), ("table_bytes", c_u64),
                ("entropy_bits", ctypes.c_double)]


def _proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P = ctypes.POINTER
strerror = _proto("pulse_strerror", c_str, c_int)
last_error = _proto("pulse_last_error", c_str)

ckpt_wrap = _proto("pulse_ckpt_wrap", c_int, P(c_void), P(MemTensor), c_size, c_int)
ckpt_close = _proto("pulse_ckpt_close", None, P(c_void))
ckpt_state_id = _proto("pulse_ckpt_state_id", c_int, c_void, c_int, ctypes.c_uint8 * 32)
ckpt_open = _proto("pulse_ckpt_open", c_int, P(c_void), c_str, c_int)

patch_open = _proto("pulse_patch_open", c_int, P(c_void), c_str)
patch_open_mem = _proto("pulse_patch_open_mem", c_int, P(c_void), c_void, c_size)
patch_close = _proto("pulse_patch_close", None, P(c_void))
patch_values = _proto("pulse_patch_values", c_int, c_void)
patch_base_id = _proto("pulse_patch_base_id", c_void, c_void)
patch_result_id = _proto("pulse_patch_result_id", c_void, c_void)
patch_tensor_count = _proto("pulse_patch_tensor_count", c_size, c_void)
patch_verify = _proto("pulse_patch_verify", c_int, c_void, c_void, c_int)
patch_tensor_info_get = _proto("pulse_patch_tensor_info_get", c_int, c_void, c_size, c_int, P(PatchTensorInfo))
patch_tensor_changes = _proto("pulse_patch_tensor_changes", c_u64, c_void, c_size)
patch_tensor_updates = _proto("pulse_patch_tensor_updates", c_int, c_void, c_size, c_void, c_int, c_void, c_void,
                              c_void)


class PatchRange(ctypes.Structure):
    _fields_ = [("offset", c_u64), ("length", c_u64)]


patch_open_head = _proto("pulse_patch_open_head", c_int, P(c_void), c_void, c_size, c_u64)
patch_head_bytes = _proto("pulse_patch_head_bytes", c_u64, c_void)
patch_is_sliced = _proto("pulse_patch_is_sliced", c_int, c_void)
patch_tensor_find = _proto("pulse_patch_tensor_find", c_int, c_void, c_str, P(c_size))
patch_want = _proto("pulse_patch_want", c_int, c_void, c_size, c_u64, c_u64)
patch_missing = _proto("pulse_patch_missing", c_size, c_void, c_u64, P(PatchRange), c_size)
patch_supply = _proto("pulse_patch_supply", c_int, c_void, c_u64, c_void, c_size)

key_generate = _proto("pulse_key_generate", c_int, P(c_void))
key_free = _proto("pulse_key_free", None, P(c_void))
key_save = _proto("pulse_key_save", c_int, c_void, c_str, c_str)
key_public = _proto("pulse_key_public", None, c_void, ctypes.c_uint8 * 32)
trust_new = _proto("pulse_trust_new", c_int, P(c_void))
trust_load = _proto("pulse_trust_load", c_int, c_void, c_str)
trust_free = _proto("pulse_trust_free", None, P(c_void))

publish_opts_default = _proto("pulse_publish_opts_default", None, P(PublishOpts))
publisher_open = _proto("pulse_publisher_open", c_int, P(c_void), P(PublishOpts))
publisher_close = _proto("pulse_publisher_close", None, P(c_void))
publisher_sync = _proto("pulse_publisher_sync", c_int, c_void)
publisher_publish = _proto("pulse_publisher_publish", c_int, c_void, c_str, ctypes.c_int64, ctypes.c_uint,
                           P(SyncStep))
publisher_publish_ckpt = _proto("pulse_publisher_publish_ckpt", c_int, c_void, c_void, ctypes.c_int64,
                                ctypes.c_uint, P(SyncStep))
publisher_publish_changes = _proto("pulse_publisher_publish_changes", c_int, c_void, c_void, c_size, ctypes.c_int64,
                                   P(SyncStep))
MEM_HOST, MEM_CUDA = 0, 1
changes_open = _proto("pulse_changes_open", c_int, P(c_void), P(MemTensor), c_size, c_int)
changes_close = _proto("pulse_changes_close", None, P(c_void))
changes_find = _proto("pulse_changes_find", c_int, c_void, P(MemTensor), c_size, P(c_void))
changes_accept = _proto("pulse_changes_accept", c_int, c_void)
publisher_commit = _proto("pulse_publisher_commit", c_int, c_void, ctypes.c_uint32, ctypes.c_int64, ctypes.c_double,
                          P(SyncStep))
follow_opts_default = _proto("pulse_follow_opts_default", None, P(FollowOpts))
follower_open = _proto("pulse_follower_open", c_int, P(c_void), P(FollowOpts))
follower_close = _proto("pulse_follower_close", None, P(c_void))
follower_sync = _proto("pulse_follower_sync", c_int, c_void)
follower_pull = _proto("pulse_follower_pull", c_int, c_void, P(c_size), P(SyncStep))

loco_view_from_name = _proto("pulse_loco_view_from_name", c_int, c_str)
loco_init_tensors = _proto("pulse_loco_init_tensors", c_int, c_str, P(LocoTensor), c_size, c_int)
loco_round_default_opts = _proto("pulse_loco_round_default_opts", None, P(LocoRoundOpts))
loco_round_ = _proto("pulse_loco_round", c_int, P(LocoRoundOpts), P(LocoReport))


def check(rc):
    """Raises PulseError for a negative return code, with the calling thread's detail."""
    if rc == 0:
        return 0
    detail = (last_error() or b"").decode("utf-8", "replace")
    text = (strerror(rc) or b"").decode("utf-8", "replace")
    raise PulseError(rc, "%s: %s" % (text, detail) if detail else text)


def check_size(opts, what):
    """The struct the library filled must fit the declaration above (see _TAIL)."""
    if opts.size > ctypes.sizeof(opts):
        raise ImportError("%s: the library's struct (%d bytes) is larger than this package knows (%d); "
                          "update python/pulseweights" % (what, opts.size, ctypes.sizeof(opts)))


def enc(s):
    """str or path -> bytes for a const char * argument (None stays NULL)."""
    if s is None:
        return None
    return os.fsencode(s)


def hex32(arr):
    return bytes(arr).hex()
