--[[
  Cluster only: applies one outbox entry (user and app state changes of a
  write that ran in a session's slot: append-12.lua, update-4.lua) to the
  user's and the app's state, once. Its id is remembered for a day, so the
  entry re-driven after a crash (or applied by two replicas at once) changes
  the states only the first time. No caps here: statecheck-2.lua checked
  them before the write, which has happened and cannot be refused any more.

  KEYS[1] the user's state   KEYS[2] the app's state
  KEYS[3] entries applied (zset: outbox field by time applied)
  ARGV[1] the outbox field   ARGV[2] now (epoch ms)   ARGV[3] how long applied ids are remembered (ms)
  ARGV[4] number of changes, then 3 per change (includes/state.lua)

  Replies 1 when applied now, 0 when it was applied before.
]]
--- @include "state"

local now = tonumber(ARGV[2])
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now - tonumber(ARGV[3]))
if redis.call("ZSCORE", KEYS[3], ARGV[1]) then
  return 0
end
local pending = {}
readStateChanges(4, pending, true)
local hashes = {u = KEYS[1], a = KEYS[2]}
for _, scope in ipairs({"u", "a"}) do
  if pending[scope] then
    local n, b = stateAfter(hashes[scope], pending[scope])
    writeState(hashes[scope], pending[scope], n, b)
  end
end
redis.call("ZADD", KEYS[3], now, ARGV[1])
return 1
