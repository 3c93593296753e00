--[[
  Updates a session's metadata and state (UpdateSession) atomically: the
  tenancy and expected version are checked, every state change is checked
  against the caps, then everything is written and the version bumped.

  KEYS[1] session hash        KEYS[2] sessions by updatedAt (zset)
  KEYS[3] the user's state    KEYS[4] the app's state (hashes, includes/state.lua);
          on a cluster both are the bucket's outbox (append-12.lua says why)

  ARGV[1] session id   ARGV[2] app name   ARGV[3] user id (the tenancy KEYS[3..4]
  were named from, checked against the session's: {"MOVED"})
  ARGV[4] expected version, "" for any   ARGV[5] now (epoch ms)
  ARGV[6] new metadata (JSON), "" to keep it
  ARGV[7] most entries of a state   ARGV[8] most bytes of a state
  ARGV[9] number of state changes, then 3 per change (includes/state.lua),
  then the outbox entry prefix ("" on one node; append-12.lua), then, when
  the caller expects one, the session's incarnation
  (StoreCall.expectedIncarnation; absent: any): another one is a session
  created since under this id: {"REPLACED"}, nothing changed

  Replies {"NOT_FOUND"} | {"REPLACED"} | {"MOVED"} | {"CONFLICT", version}
        | {"TOO_LARGE", scope, entries, bytes}
        | {"OK", <HGETALL of the session>[, outbox field, its value]}
]]
--- @include "state"

local session = redis.call("HMGET", KEYS[1], "app", "user", "ver", "inc")
if not session[1] then
  return {"NOT_FOUND"}
end
local pending = {}
local afterChanges = readStateChanges(9, pending, true)
local outboxPrefix = ARGV[afterChanges] or ""
local expected = ARGV[afterChanges + 1]
if expected and expected ~= (session[4] or "") then
  return {"REPLACED"}
end
if session[1] ~= ARGV[2] or session[2] ~= ARGV[3] then
  return {"MOVED"}
end
local version = tonumber(session[3] or "0")
if ARGV[4] ~= "" and tonumber(ARGV[4]) ~= version then
  return {"CONFLICT", version}
end

local shared = nil
if outboxPrefix ~= "" then
  shared = takeSharedChanges(pending)
end
local refused = applyStateChanges(pending, {s = KEYS[1], u = KEYS[3], a = KEYS[4]}, tonumber(ARGV[7]), tonumber(ARGV[8]))
if refused then
  return refused
end
if ARGV[6] ~= "" then
  redis.call("HSET", KEYS[1], "meta", ARGV[6])
end
redis.call("HSET", KEYS[1], "ver", version + 1, "updated", ARGV[5])
redis.call("ZADD", KEYS[2], ARGV[5], ARGV[1])
if shared then
  local field = outboxPrefix .. (redis.call("HGET", KEYS[1], "inc") or "") .. "!" .. (version + 1)
  local value = cjson.encode({app = session[1], user = session[2], at = tonumber(ARGV[5]), changes = shared})
  redis.call("HSET", KEYS[3], field, value)
  return {"OK", redis.call("HGETALL", KEYS[1]), field, value}
end
return {"OK", redis.call("HGETALL", KEYS[1])}
