--[[
  Deletes a session with every key of it, its index entries and its recent
  entries, adjusts the counters and publishes a deleted notice. Used by
  deleteSession, eviction and cleanup; the last two pass conditions that are
  re-checked here so that a session updated meanwhile (on any replica) is kept.

  The caller names the per-app/per-user index keys from the app and user it
  read; they are checked against the session so a session re-created under
  the same id with another tenancy is never half-removed ({"MOVED"}: re-read).

  KEYS[1] session hash   KEYS[2] events hash   KEYS[3] event ids hash
  KEYS[4] sessions by updatedAt   KEYS[5] stats hash   KEYS[6] recent events of every session
  KEYS[7] index: all   KEYS[8] index: app   KEYS[9] index: user   KEYS[10] index: app + user
  KEYS[11] recent events of the app   KEYS[12] of the user   KEYS[13] of the app + user
  KEYS[14] trimmed ids (the dedupe window's zset)

  ARGV[1] session id   ARGV[2] app name   ARGV[3] user id
  ARGV[4] session id as JSON (for the notice)   ARGV[5] notice channel
  ARGV[6] recent member prefix
  ARGV[7] delete only when updatedAt < this ("" for always)
  ARGV[8] delete only when more than this many sessions exist ("" for always;
          always "" on a cluster, where KEYS[5] counts one bucket's)
  ARGV[9] the publish command: PUBLISH, or SPUBLISH on a cluster (the bucket's channel, in this slot)
  ARGV[10] when the caller expects one, the session's incarnation
           (StoreCall.expectedIncarnation; absent: any): another one is a
           session created since under this id: {"REPLACED"}, kept

  Replies {"DELETED", <events it held>} | {"GONE"} | {"REPLACED"} | {"MOVED"} | {"KEPT"}
  The notice is '{"s":<session id>,"d":1,"i":<incarnation>}'.
]]
--- @include "recent"

local s = redis.call("HMGET", KEYS[1], "app", "user", "updated", "head", "first", "inc")
if not s[1] then
  return {"GONE"}
end
if ARGV[10] and ARGV[10] ~= (s[6] or "") then
  return {"REPLACED"}
end
if s[1] ~= ARGV[2] or s[2] ~= ARGV[3] then
  return {"MOVED"}
end
if ARGV[7] ~= "" and tonumber(s[3]) >= tonumber(ARGV[7]) then
  return {"KEPT"}
end
if ARGV[8] ~= "" and tonumber(redis.call("HGET", KEYS[5], "sessions") or "0") <= tonumber(ARGV[8]) then
  return {"KEPT"}
end

-- Every recent index the session's events are in.
local function unindex(members)
  for _, k in ipairs({6, 11, 12, 13}) do
    redis.call("ZREM", KEYS[k], unpack(members))
  end
end

local head, first = tonumber(s[4]), tonumber(s[5])
local batch = {}
for seq = first, head do
  batch[#batch + 1] = recentMember(ARGV[6], seq)
  if #batch == 500 then
    unindex(batch)
    batch = {}
  end
end
if #batch > 0 then
  unindex(batch)
end

redis.call("DEL", KEYS[1], KEYS[2], KEYS[3], KEYS[14])
redis.call("ZREM", KEYS[4], ARGV[1])
for i = 7, 10 do
  redis.call("ZREM", KEYS[i], ARGV[1])
end
redis.call("HINCRBY", KEYS[5], "sessions", -1)
-- first - head - 1, not -(head - first + 1): Lua would send "-0", which HINCRBY refuses.
redis.call("HINCRBY", KEYS[5], "events", first - head - 1)
-- The incarnation is base64url (or "" for sessions stored before incarnations): no JSON escaping needed.
redis.call(ARGV[9] or "PUBLISH", ARGV[5], '{"s":' .. ARGV[4] .. ',"d":1,"i":"' .. (s[6] or "") .. '"}')
return {"DELETED", head - first + 1}
