--[[
  Cluster only: checks user and app state changes against the caps, writing
  nothing, before the write that carries them runs in the session's slot
  (append-12.lua, update-4.lua put them in the outbox; shared-3.lua applies
  them here later). On one node the writing script checks them itself,
  atomically; here two writes racing under the cap may together pass it.

  KEYS[1] the user's state   KEYS[2] the app's state (one slot: the app's)
  ARGV[1] most entries of a state   ARGV[2] most bytes of a state
  ARGV[3] number of changes, then 3 per change (scope "u" or "a", key, value: includes/state.lua)

  Replies {"OK"} | {"TOO_LARGE", scope, entries, bytes}
]]
--- @include "state"

local pending = {}
readStateChanges(3, pending, true)
local hashes = {u = KEYS[1], a = KEYS[2]}
for _, scope in ipairs({"u", "a"}) do
  if pending[scope] then
    local n, b = stateAfter(hashes[scope], pending[scope])
    if n > tonumber(ARGV[1]) or b > tonumber(ARGV[2]) then
      return {"TOO_LARGE", scope, n, b}
    end
  end
end
return {"OK"}
