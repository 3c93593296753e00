--[[
  Stores a batch of long-term memories atomically (src/store/memories/redis.ts
  says the layout): every check first, then every change, so a refused batch
  changes nothing; and being one script, two replicas writing the same
  supersession key never interleave, so exactly one memory of a key holds.

  KEYS: 11 per app of the batch, app after app: records, validity, index
  entries, order, by user, groups, meta, held, embeddings, vectors, change
  log (see redis.ts).
  ARGV[1] notice channel   ARGV[2] origin (the writing replica)   ARGV[3] n
  then 16 per memory: app number (1-based, into KEYS), hex id, fingerprint,
  record JSON (without validity and embedding), created (16 digits), hex user or "-",
  hex group or "" (no supersession key), valid from, invalid at or "",
  embedding dimension or 0, valid from as 16 digits that sort (+ 10^15),
  the embedding as JSON and as float64 little-endian bytes (both "" without),
  the app's document key prefix ("" without documents), the document's
  fields (JSON) and its vector as FLOAT32 bytes ("" without);
  then the changes each app's log retains, the command that publishes the
  notice ("PUBLISH" on one node; "SPUBLISH" on a cluster, where the channel
  carries the app's hash tag, so it is in the slot of the keys), and "check"
  to run the checks only (a batch of several apps on a cluster, checked
  across its apps before any is written) or "" to write.

  Each change is numbered by its app (meta "seq", one more per change) and
  logged: "<seq>:w:<hex id>" or "<seq>:s:<hex id>" under score seq; the log
  keeps the app's newest retained changes.

  With the Redis Query Engine each memory has a document (redis.ts), written
  and deleted with it, and a memory closed gets its document's invalid_at.
  An app's documents are complete only while every change of the app was
  made by a script that keeps them: meta "docchain" equal to the app's
  stamp, "<seq>:<memories in order>" (docs-5.lua says why both, and builds
  them when they are not). A batch that finds the chain intact extends it
  over its own changes, and the first batch of an app with no memory yet
  starts it.

  A group's memories are indexed by valid from twice: all of them (groups),
  and those that held for a while (held). The validities of the latter never
  overlap (each write closes the one holding when it starts and ends where
  the next one starts), so the one that may hold at a time is the latest of
  them starting at or before it; the next is the first of all starting
  after: two range reads, whatever the number of versions. A memory closed
  where it started (by a later write of the same valid from) never held and
  leaves the held index.

  Replies {"TAKEN", i} (0-based) for a memory id stored, or earlier in the
  batch, with another fingerprint; {"DIMENSION", i, got, want} for an
  embedding of another dimension than the app's; otherwise {"OK", notice,
  then record, validity and embedding JSON (or "") of each memory of the
  batch (the stored original of a retry), then of each memory the batch
  closed}, all as they are now. The notice is what was published ("" when
  nothing changed); it lists each change as [kind, record, validity,
  embedding or null, change number]. A check that passes replies {"OK"}.
]]
local channel, origin, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local retained, publish, checkOnly = tonumber(ARGV[4 + n * 16]), ARGV[5 + n * 16], ARGV[6 + n * 16] == "check"
local function arg(i, k) return ARGV[3 + (i - 1) * 16 + k] end
local function key(app, k) return KEYS[(app - 1) * 11 + k] end
--- @include "stamp"
local function stamp(app) return appStamp(key(app, 7), key(app, 4)) end
-- A stored memory as a notice lists it, numbered and logged.
local function change(kind, app, id, validity)
  local seq = redis.call("HINCRBY", key(app, 7), "seq", 1)
  redis.call("ZADD", key(app, 11), seq, seq .. ":" .. kind .. ":" .. id)
  redis.call("ZREMRANGEBYSCORE", key(app, 11), "-inf", seq - retained)
  return '["' .. kind .. '",' .. redis.call("HGET", key(app, 1), id) .. ',"' .. validity .. '",' .. (redis.call("HGET", key(app, 9), id) or "null") .. "," .. seq .. "]"
end

-- Checks: nothing is written before all of them pass.
local dims, seen = {}, {}
for i = 1, n do
  local app, id, fingerprint, dim = tonumber(arg(i, 1)), arg(i, 2), arg(i, 3), tonumber(arg(i, 10))
  if dim > 0 then
    local want = dims[app] or tonumber(redis.call("HGET", key(app, 7), "dim") or dim)
    if dim ~= want then return {"DIMENSION", i - 1, dim, want} end
    dims[app] = want
  end
  local entry = redis.call("HGET", key(app, 3), id)
  if entry and string.match(entry, "[^:]*$") ~= fingerprint then return {"TAKEN", i - 1} end
  local batchKey = app .. ":" .. id
  if seen[batchKey] and seen[batchKey] ~= fingerprint then return {"TAKEN", i - 1} end
  seen[batchKey] = seen[batchKey] or fingerprint
end
if checkOnly then return {"OK"} end

-- Per app: whether its documents are complete before this batch (so stay complete after it).
local chained = {}
for i = 1, n do
  local app = tonumber(arg(i, 1))
  if chained[app] == nil and arg(i, 14) ~= "" then
    local now, chain = stamp(app), redis.call("HGET", key(app, 7), "docchain")
    if not chain and redis.call("ZCARD", key(app, 4)) == 0 then
      -- No memory yet: no document is missing.
      redis.call("HSET", key(app, 7), "docbuild", "empty", "docready", "empty", "docchain", now)
      chain = now
    end
    chained[app] = chain == now
  end
end

local changes, closed, closedSeen = {}, {}, {}
for i = 1, n do
  local app, id, fingerprint, record = tonumber(arg(i, 1)), arg(i, 2), arg(i, 3), arg(i, 4)
  local created, user, group = arg(i, 5), arg(i, 6), arg(i, 7)
  local validFrom, invalidAt, dim, sortable = arg(i, 8), arg(i, 9), tonumber(arg(i, 10)), arg(i, 11)
  -- Stored already (a retry, or twice in this batch): the original stays as it is.
  if redis.call("HEXISTS", key(app, 1), id) == 0 then
    local supersededBy = ""
    if group ~= "" then
      local from, at = tonumber(validFrom), group .. ":" .. sortable
      -- Peer ids follow "<group>:<16 digits>:".
      local held = redis.call("ZREVRANGEBYLEX", key(app, 8), "(" .. at .. ";", "[" .. group .. ":", "LIMIT", 0, 1)[1]
      if held then
        local peer = string.sub(held, #group + 19)
        local peerFrom, peerUntil = string.match(redis.call("HGET", key(app, 2), peer), "^([^:]*):([^:]*):")
        -- Valid when the new one starts: its validity ends there (closed, never deleted).
        if peerUntil == "" or tonumber(peerUntil) > from then
          local validity = peerFrom .. ":" .. validFrom .. ":" .. id
          redis.call("HSET", key(app, 2), peer, validity)
          local doc = arg(i, 14) .. peer
          if arg(i, 14) ~= "" and redis.call("HEXISTS", doc, "app") == 1 then redis.call("HSET", doc, "invalid_at", validFrom) end
          if peerFrom == validFrom then redis.call("ZREM", key(app, 8), held) end
          if not closedSeen[app .. ":" .. peer] then
            closedSeen[app .. ":" .. peer] = true
            closed[#closed + 1] = {app, peer}
          end
          changes[#changes + 1] = change("s", app, peer, validity)
        end
      end
      local next = redis.call("ZRANGEBYLEX", key(app, 6), "(" .. at .. ";", "(" .. group .. ";", "LIMIT", 0, 1)[1]
      if next then
        -- A later memory of the key exists: the new one held only until it began.
        local peer = string.sub(next, #group + 19)
        local peerFrom = string.match(redis.call("HGET", key(app, 2), peer), "^([^:]*):")
        if invalidAt == "" or tonumber(invalidAt) > tonumber(peerFrom) then
          invalidAt = peerFrom
          supersededBy = peer
        end
      end
      redis.call("ZADD", key(app, 6), 0, at .. ":" .. id)
      redis.call("ZADD", key(app, 8), 0, at .. ":" .. id)
    end
    local validity = validFrom .. ":" .. invalidAt .. ":" .. supersededBy
    redis.call("HSET", key(app, 1), id, record)
    if arg(i, 12) ~= "" then
      redis.call("HSET", key(app, 9), id, arg(i, 12))
      redis.call("HSET", key(app, 10), id, arg(i, 13))
    end
    redis.call("HSET", key(app, 2), id, validity)
    redis.call("HSET", key(app, 3), id, created .. ":" .. user .. ":" .. group .. ":" .. sortable .. ":" .. fingerprint)
    redis.call("ZADD", key(app, 4), 0, created .. ":" .. id)
    redis.call("ZADD", key(app, 5), 0, user .. ":" .. created .. ":" .. id)
    if arg(i, 14) ~= "" then writeDocument(arg(i, 14) .. id, arg(i, 15), validity, arg(i, 16)) end
    if dim > 0 then redis.call("HSETNX", key(app, 7), "dim", dim) end
    changes[#changes + 1] = change("w", app, id, validity)
  end
end

for app, intact in pairs(chained) do
  if intact then redis.call("HSET", key(app, 7), "docchain", stamp(app)) end
end

local notice = ""
if #changes > 0 then
  notice = '{"o":"' .. origin .. '","c":[' .. table.concat(changes, ",") .. "]}"
  redis.call(publish, channel, notice)
end
local reply = {"OK", notice}
for i = 1, n do
  local app, id = tonumber(arg(i, 1)), arg(i, 2)
  reply[#reply + 1] = redis.call("HGET", key(app, 1), id)
  reply[#reply + 1] = redis.call("HGET", key(app, 2), id)
  reply[#reply + 1] = redis.call("HGET", key(app, 9), id) or ""
end
for _, c in ipairs(closed) do
  reply[#reply + 1] = redis.call("HGET", key(c[1], 1), c[2])
  reply[#reply + 1] = redis.call("HGET", key(c[1], 2), c[2])
  reply[#reply + 1] = redis.call("HGET", key(c[1], 9), c[2]) or ""
end
return reply
