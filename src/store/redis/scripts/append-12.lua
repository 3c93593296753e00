--[[
  Appends a batch of events to one session, atomically and in O(batch):
  session check, event_id idempotency, expected_seq, consecutive seqs,
  ring-buffer trim, session/indexes/counters update, the new events' state
  deltas (includes/state.lua; a retry's delta is not applied again) and the
  notice.

  A trimmed event's id stays in the ids hash for the dedupe window, listed in
  the trimmed-ids zset by trim time, so that a retry of it is still a retry;
  entries past the window (or past the per-session bound) are dropped here.
  An id whose seq is below "first" is such a trimmed one: a retry of it
  answers its seq with no stored encoding.

  A resent command (ioredis re-sends unfulfilled commands after a reconnect)
  carries the same event ids and fingerprints, so it replays the originals
  instead of appending twice.

  KEYS[1] session hash                KEYS[2] events hash (seq -> encoded event)
  KEYS[3] event ids hash (id -> "seq:fingerprint")
  KEYS[4] sessions by updatedAt       KEYS[5] stats hash
  KEYS[6] recent events of every session   KEYS[7] of the session's app
  KEYS[8] of the session's user           KEYS[9] of its app and user
          (zsets, score = ingest position: the store-wide count of events
          appended when the event was, never the client's timestamp)
  KEYS[10] trimmed ids (zset: event id by trim time)
  KEYS[11] the user's state   KEYS[12] the app's state (hashes, includes/state.lua);
           on a cluster both are the bucket's outbox (see the last ARGVs)

  ARGV by the names of APPEND_ARGV (src/store/redis/script-args.ts; each
  section's field positions in the tables "--- @argv" below stands for):
  HEAD: session id, session id as JSON (for the notice), expected seq ("" for
  none), now (epoch ms), max events per session (0: no cap), max entries of
  the recent index, recent member prefix, notice channel, number of events n;
  then EVENT per event: event id, fingerprint, timestamp (unused), encoding;
  TENANCY: largest notice that may carry the appended events (bytes); app
  name and user id: the tenancy KEYS[7..9] were named from, checked against
  the session's ({"MOVED"}: re-read, retry); dedupe window (ms; 0: trimmed
  ids are forgotten at once); most trimmed ids kept per session; number of
  apps with their own events cap, then CAP per such app: app name, cap;
  STATE_LIMITS: most entries, most bytes of a state; then per event its
  state changes (a count, then 3 per change: includes/state.lua); TAIL:
  the outbox entry prefix ("<hex id>!"; "" on one node: user and app changes
  go to KEYS[11..12] with the rest. On a cluster they are in another slot:
  they go to the outbox, KEYS[11], as field "<prefix><incarnation>!<version>"
  -> JSON {"app", "user", "at", "changes": [ [scope, key, value], ... ]}, for
  the driver to apply in the app's slot (shared-3.lua); their caps were
  checked there before this call (statecheck-2.lua)),
  the ingest base ("" on one node: positions count the events appended;
  a cluster: the replica's clock in µs, positions then never go below it
  nor below the bucket's last one), the publish command (PUBLISH, or
  SPUBLISH on a cluster: the channel is the bucket's, in this slot), and,
  when the caller expects one, the session's incarnation
  (StoreCall.expectedIncarnation; absent: any): another one is a session
  created since under this id, never the caller's: {"REPLACED"}, before
  anything is read or written (a retry's originals included)

  Encoded event: "<len>:<event type><len>:<event id><json>" (byte lengths), so
  the type and id can be read here without decoding the JSON (includes/frames.lua).

  Replies {"NOT_FOUND"} | {"REPLACED"} | {"MOVED"} | {"DUPLICATE", event id} | {"CONFLICT", head}
        | {"TOO_LARGE", scope, entries, bytes} (nothing appended)
        | {"OK", replayed 0/1, head, first, then per event: seq, stored encoding or ""
           (nil for a retry of a trimmed event), then the number of events trimmed,
           then (cluster, when the new events change app or user state) the outbox field and its value}

  The notice is '{"s":<session id>,"h":<head>,"i":<incarnation>}', or, when the retained new
  events fit in the notice limit, '{"s":...,"h":...,"i":...,"k":<count>}' followed by
  a newline and each event's encoding, length-prefixed ("<bytes>:<encoding>"),
  in seq order ending at head: replicas then deliver them without reading
  them back.
]]
--- @include "frames"
--- @include "recent"
--- @include "state"
--- @argv "append"

-- An ids hash entry "seq:fingerprint": its seq (the stored text) and its fingerprint.
local function splitIndexed(indexed)
  local sep = string.find(indexed, ":", 1, true)
  return string.sub(indexed, 1, sep - 1), string.sub(indexed, sep + 1)
end

local session = redis.call("HMGET", KEYS[1], "head", "first", "inc", "app", "user")
if not session[1] then
  return {"NOT_FOUND"}
end
local n = tonumber(ARGV[HEAD.eventCount])
-- The sections after the events, and after the caps, start where those end.
local afterEvents = HEAD.size + EVENT.size * n
local capCount = tonumber(ARGV[afterEvents + TENANCY.capCount]) or 0
local afterCaps = afterEvents + TENANCY.size + CAP.size * capCount
local stateArgs = afterCaps + STATE_LIMITS.maxStateKeys
-- The expected incarnation comes last, after every event's state changes: skip them (reading nothing) to find it.
local expectedAt = afterCaps + STATE_LIMITS.size + 1
for _ = 1, n do
  expectedAt = readStateChanges(expectedAt, nil, false)
end
local expected = ARGV[expectedAt - 1 + TAIL.incarnation]
if expected and expected ~= (session[3] or "") then
  return {"REPLACED"}
end
if session[4] ~= ARGV[afterEvents + TENANCY.appName] or session[5] ~= ARGV[afterEvents + TENANCY.userId] then
  return {"MOVED"}
end
local head, first = tonumber(session[1]), tonumber(session[2])

local now = tonumber(ARGV[HEAD.now])
local window = tonumber(ARGV[afterEvents + TENANCY.dedupeWindowMs]) or 0
local maxIds = tonumber(ARGV[afterEvents + TENANCY.dedupeMaxIds]) or 0
local remember = window > 0 and maxIds > 0

-- Drops trimmed ids from the ids hash (only while they still name a trimmed seq).
local function forget(ids)
  for _, id in ipairs(ids) do
    local indexed = redis.call("HGET", KEYS[3], id)
    if indexed and tonumber((splitIndexed(indexed))) < first then
      redis.call("HDEL", KEYS[3], id)
    end
  end
end

local expired = redis.call("ZRANGEBYSCORE", KEYS[10], "-inf", now - window)
if #expired > 0 then
  forget(expired)
  redis.call("ZREMRANGEBYSCORE", KEYS[10], "-inf", now - window)
end
local known = {}
local fresh = 0
for i = 1, n do
  local base = HEAD.size + (i - 1) * EVENT.size
  local stored = redis.call("HGET", KEYS[3], ARGV[base + EVENT.eventId])
  if stored then
    local seq, fingerprint = splitIndexed(stored)
    if fingerprint ~= ARGV[base + EVENT.fingerprint] then
      return {"DUPLICATE", ARGV[base + EVENT.eventId]}
    end
    known[i] = tonumber(seq)
  else
    fresh = fresh + 1
  end
end

local reply = {"OK", 0, head, first}
if fresh == 0 then
  reply[2] = 1
  for i = 1, n do
    reply[#reply + 1] = known[i]
    reply[#reply + 1] = redis.call("HGET", KEYS[2], known[i])
  end
  return reply
end

local expectedSeq = ARGV[HEAD.expectedSeq]
if expectedSeq ~= "" and tonumber(expectedSeq) ~= head then
  return {"CONFLICT", head}
end

-- The new events' state changes, checked and written before any event is: a refused state appends nothing.
local pending = {}
local stateAt = afterCaps + STATE_LIMITS.size + 1
for i = 1, n do
  stateAt = readStateChanges(stateAt, pending, not known[i])
end
-- Absent (a caller of the one-node layout that predates them): one node's behaviour.
local tail = stateAt - 1
local outboxPrefix = ARGV[tail + TAIL.outboxPrefix] or ""
local ingestBase = ARGV[tail + TAIL.ingestBase] or ""
local publish = ARGV[tail + TAIL.publish] or "PUBLISH"
local outboxField, outboxValue
if hasStateChanges(pending) then
  local shared = nil
  if outboxPrefix ~= "" then
    shared = takeSharedChanges(pending)
  end
  local refused = applyStateChanges(pending, {s = KEYS[1], u = KEYS[11], a = KEYS[12]}, tonumber(ARGV[stateArgs]), tonumber(ARGV[afterCaps + STATE_LIMITS.maxStateBytes]))
  if refused then
    return refused
  end
  local version = redis.call("HINCRBY", KEYS[1], "ver", 1)
  if shared then
    outboxField = outboxPrefix .. (session[3] or "") .. "!" .. version
    outboxValue = cjson.encode({app = session[4], user = session[5], at = now, changes = shared})
    redis.call("HSET", KEYS[11], outboxField, outboxValue)
  end
end

local appended = {}
-- Ingest positions of this append's new events: fresh, consecutive, store-wide.
local ingest
if ingestBase == "" then
  ingest = redis.call("HINCRBY", KEYS[5], "ingested", fresh) - fresh
else
  ingest = math.max(tonumber(redis.call("HGET", KEYS[5], "ingested") or "0"), tonumber(ingestBase))
  redis.call("HSET", KEYS[5], "ingested", string.format("%.0f", ingest + fresh))
end

for i = 1, n do
  local base = HEAD.size + (i - 1) * EVENT.size
  if known[i] then
    reply[#reply + 1] = known[i]
    reply[#reply + 1] = redis.call("HGET", KEYS[2], known[i])
  else
    head = head + 1
    appended[#appended + 1] = ARGV[base + EVENT.encoded]
    redis.call("HSET", KEYS[2], head, ARGV[base + EVENT.encoded])
    redis.call("HSET", KEYS[3], ARGV[base + EVENT.eventId], head .. ":" .. ARGV[base + EVENT.fingerprint])
    ingest = ingest + 1
    for k = 6, 9 do
      redis.call("ZADD", KEYS[k], ingest, recentMember(ARGV[HEAD.memberPrefix], head))
    end
    reply[#reply + 1] = head
    reply[#reply + 1] = ""
  end
end

-- Ring buffer: drop the oldest events and their recent entries; their ids are
-- remembered for the dedupe window, or dropped.
local max = tonumber(ARGV[HEAD.maxSessionEvents])
for i = 1, capCount do
  local cap = afterEvents + TENANCY.size + (i - 1) * CAP.size
  if ARGV[cap + CAP.app] == session[4] then
    max = tonumber(ARGV[cap + CAP.maxEvents])
  end
end
local trimmed = 0
while max > 0 and head - first + 1 > max do
  local stored = redis.call("HGET", KEYS[2], first)
  if stored then
    local _, pos = readFrame(stored, 1)
    local id = readFrame(stored, pos)
    local indexed = redis.call("HGET", KEYS[3], id)
    -- Only when the id still points here (a batch may repeat an id).
    if indexed and splitIndexed(indexed) == tostring(first) then
      if remember then
        redis.call("ZADD", KEYS[10], now, id)
      else
        redis.call("HDEL", KEYS[3], id)
      end
    end
    redis.call("HDEL", KEYS[2], first)
    trimmed = trimmed + 1
  end
  for k = 6, 9 do
    redis.call("ZREM", KEYS[k], recentMember(ARGV[HEAD.memberPrefix], first))
  end
  first = first + 1
end

local surplus = redis.call("ZCARD", KEYS[10]) - maxIds
if surplus > 0 then
  forget(redis.call("ZRANGE", KEYS[10], 0, surplus - 1))
  redis.call("ZREMRANGEBYRANK", KEYS[10], 0, surplus - 1)
end

redis.call("HSET", KEYS[1], "head", head, "first", first, "updated", ARGV[HEAD.now])
redis.call("ZADD", KEYS[4], ARGV[HEAD.now], ARGV[HEAD.sessionId])
redis.call("HINCRBY", KEYS[5], "events", fresh - trimmed)

-- Each recent index keeps its newest `cap` entries.
local cap = tonumber(ARGV[HEAD.recentCap])
for k = 6, 9 do
  if redis.call("ZCARD", KEYS[k]) > cap then
    redis.call("ZREMRANGEBYRANK", KEYS[k], 0, -(cap + 1))
  end
end

-- The new events still retained (a batch longer than the cap keeps only its newest).
local kept = math.min(#appended, head - first + 1)
-- The incarnation is base64url (or "" for sessions stored before incarnations): no JSON escaping needed.
local notice = '{"s":' .. ARGV[HEAD.sessionIdJson] .. ',"h":' .. string.format("%d", head) .. ',"i":"' .. (session[3] or "") .. '"'
local parts, size = {}, #notice
for i = #appended - kept + 1, #appended do
  local encoded = appended[i]
  parts[#parts + 1] = frame(encoded)
  size = size + #parts[#parts]
end
if kept > 0 and size <= (tonumber(ARGV[afterEvents + TENANCY.noticeMaxBytes]) or 0) then
  notice = notice .. ',"k":' .. kept .. '}\n' .. table.concat(parts)
else
  notice = notice .. '}'
end
redis.call(publish, ARGV[HEAD.channel], notice)
reply[3] = head
reply[4] = first
reply[#reply + 1] = trimmed
if outboxField then
  reply[#reply + 1] = outboxField
  reply[#reply + 1] = outboxValue
end
return reply
