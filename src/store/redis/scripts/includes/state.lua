--[[
  Session state (src/store/state.ts): each entry of a state is a hash field
  "st:<key>" holding the value's JSON, beside "stn" (how many entries) and
  "stb" (their bytes: each key's and value's byte length, as
  src/store/state.ts entryBytes counts them). A session's state lives in its
  session hash, a user's and an app's in hashes of their own (keys.ts).

  Changes come in ARGV as a count, then (scope, key, value) triples: scope
  "s" (session), "u" (user) or "a" (app); the key without its prefix; the
  value's JSON, or "" to delete the key. All changes are checked against the
  caps before any is written, so a refused change writes nothing.
]]

-- Adds the changes listed at ARGV[pos] (count, then triples) to `pending` when `take`, else skips them; returns the position after them.
local function readStateChanges(pos, pending, take)
  local count = tonumber(ARGV[pos]) or 0
  if take then
    for i = 1, count do
      local base = pos + (i - 1) * 3
      local scope, key, value = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
      local changes = pending[scope]
      if not changes then
        changes = {order = {}, values = {}}
        pending[scope] = changes
      end
      if changes.values[key] == nil then
        changes.order[#changes.order + 1] = key
      end
      changes.values[key] = value
    end
  end
  return pos + 1 + count * 3
end

-- Entries and bytes the state in `hash` would hold after `changes`; writes nothing.
local function stateAfter(hash, changes)
  local n = tonumber(redis.call("HGET", hash, "stn") or "0")
  local b = tonumber(redis.call("HGET", hash, "stb") or "0")
  for _, key in ipairs(changes.order) do
    local old = redis.call("HGET", hash, "st:" .. key)
    if old then
      n = n - 1
      b = b - #key - #old
    end
    local value = changes.values[key]
    if value ~= "" then
      n = n + 1
      b = b + #key + #value
    end
  end
  return n, b
end

-- Writes `changes` into the state in `hash`, with its new totals.
local function writeState(hash, changes, n, b)
  for _, key in ipairs(changes.order) do
    local value = changes.values[key]
    if value == "" then
      redis.call("HDEL", hash, "st:" .. key)
    else
      redis.call("HSET", hash, "st:" .. key, value)
    end
  end
  if n == 0 then
    redis.call("HDEL", hash, "stn", "stb")
  else
    redis.call("HSET", hash, "stn", n, "stb", b)
  end
end

-- True when `pending` holds any change.
local function hasStateChanges(pending)
  return next(pending) ~= nil
end

-- Checks every scope's changes against the caps, then writes them all.
-- `hashes`: the hash of each scope ("s", "u", "a"). Returns nil, or
-- {"TOO_LARGE", scope, entries, bytes} having written nothing.
local function applyStateChanges(pending, hashes, maxKeys, maxBytes)
  local totals = {}
  for _, scope in ipairs({"s", "u", "a"}) do
    if pending[scope] then
      local n, b = stateAfter(hashes[scope], pending[scope])
      if n > maxKeys or b > maxBytes then
        return {"TOO_LARGE", scope, n, b}
      end
      totals[scope] = {n, b}
    end
  end
  for scope, t in pairs(totals) do
    writeState(hashes[scope], pending[scope], t[1], t[2])
  end
  return nil
end

-- Cluster: removes the user ("u") and app ("a") changes from `pending` and
-- returns them as a list of {scope, key, value}, or nil when there are none
-- (they are applied in another slot: shared-3.lua).
local function takeSharedChanges(pending)
  local shared = {}
  for _, scope in ipairs({"u", "a"}) do
    local changes = pending[scope]
    if changes then
      for _, key in ipairs(changes.order) do
        shared[#shared + 1] = {scope, key, changes.values[key]}
      end
      pending[scope] = nil
    end
  end
  if #shared == 0 then
    return nil
  end
  return shared
end
