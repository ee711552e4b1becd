"""What the host and the in-container runner agree on: the frame, its bounds, the op names, the envelope's fields.

Stdlib only and import-free of the rest of the gym: the host reads it through `sandbox.protocol` (the typed
models) and the runner image carries it beside the runner package (`sandbox/runner/`), so both sides hold
one copy of each figure. A frame is a 4-byte big-endian length (HEADER) and a JSON object: a request
``{ID, OP, BODY}``, a reply ``{ID, OK, BODY}`` or ``{ID, OK: false, ERROR}``; an exec_batch item goes out
early as ``{ID, OK, PARTIAL: true, BODY: {ITEM, RESULT}}``. The runner's first frame (id 0) is its hello.
"""

import struct

HEADER = struct.Struct(">I")
MAX_FRAME = 256 << 20
PROTOCOL_VERSION = 1
# Every reply is bounded where it is produced, so none can pass the host's frame bound (a lost stream
# masks the episode: the candidate would hide its own failure): bytes of data an operation returns
# (file, output, archive; base64 makes them 4/3 as many), and entries a listing returns (a name of 255
# bytes that are all control characters is 1,530 bytes of JSON). The host's request models refuse more;
# the runner clamps to them again whatever a request asks, and past a bound its reply says output_truncated.
MAX_DATA = 96 << 20
MAX_LIST_ENTRIES = 20000

# Op names (each but ping has a request and a result model in sandbox.protocol.OPERATIONS).
EXEC = "exec"
EXEC_BATCH = "exec_batch"
READ_FILE = "read_file"
WRITE_FILE = "write_file"
LIST_DIR = "list_dir"
PUT_ARCHIVE = "put_archive"
GET_ARCHIVE = "get_archive"
PING = "ping"
RESET = "reset"

# The envelope's fields.
ID = "id"
OP = "op"
BODY = "body"
OK = "ok"
ERROR = "error"
PARTIAL = "partial"
ITEM = "item"
RESULT = "result"

# The hello's body: {HELLO: RUNNER_NAME, VERSION: PROTOCOL_VERSION}.
HELLO = "hello"
VERSION = "version"
RUNNER_NAME = "gym-runner"
# The first line of the fork server's program (`sandbox/runner/zygote.py`, run as ``python3 -I -c``): how a
# process listing tells it apart (with its user, root, which no command of the sandbox user can be).
FORK_SERVER_TAG = "# gym-fork-server"
