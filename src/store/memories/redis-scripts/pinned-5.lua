--[[
  Builds one app's pinned index afresh (src/store/memories/redis.ts says the
  layout), a page per call, while writes go on.

  The index is complete while meta "pinready" names the latest build
  ("pinbuild") and "pinchain" equals the app's stamp, "<seq>:<memories in
  order>": every memory stored before the build began was scanned into it,
  and every change since was made by a script that keeps it (write-n.lua,
  delete-12.lua), since each of those extends the chain only when it finds
  it intact. A change by a script that does not keep it (an older release,
  during a rolling upgrade) leaves the chain behind the stamp, and readers
  walk the scope's index until a new build: releases since the change log
  count every change in "seq"; the earliest ones did not, but every memory
  they wrote or deleted changed the count (a write and a deletion of theirs
  between two changes of this release would offset each other: a rolling
  upgrade from them can miss a pinned memory until the next build).

  KEYS[1] records   KEYS[2] index entries   KEYS[3] order   KEYS[4] meta
  KEYS[5] pinned
  ARGV[1] "begin", "page" or "finish"   ARGV[2] the build's token (unique
  per build)   for "page": ARGV[3] the order entry the last page ended at
  ("" for the first) and ARGV[4] the page size.

  "begin" empties the index and starts the chain at the app's stamp; "page"
  scans the next page of the app's memories, oldest first, and replies
  {"OK", the page's last entry, or "" after the last page}, or {"ABORTED"}
  once another build has begun; "finish" marks the index complete if no
  other build began meanwhile.
]]
--- @include "stamp"
local meta, mode, token = KEYS[4], ARGV[1], ARGV[2]
if mode == "begin" then
  redis.call("DEL", KEYS[5])
  redis.call("HDEL", meta, "pinready")
  redis.call("HSET", meta, "pinbuild", token, "pinchain", appStamp(meta, KEYS[3]))
  return {"OK"}
end
if redis.call("HGET", meta, "pinbuild") ~= token then return {"ABORTED"} end
if mode == "finish" then
  redis.call("HSET", meta, "pinready", token)
  return {"OK"}
end
local after, size = ARGV[3], tonumber(ARGV[4])
local entries = redis.call("ZRANGEBYLEX", KEYS[3], after == "" and "-" or "(" .. after, "+", "LIMIT", 0, size)
for _, entry in ipairs(entries) do
  -- "<created, 16 digits>:<hex id>"
  local created, id = string.sub(entry, 1, 16), string.sub(entry, 18)
  local record, indexed = redis.call("HGET", KEYS[1], id), redis.call("HGET", KEYS[2], id)
  -- The record's JSON says "pinned":true only as the field itself or inside metadata: decoded to tell.
  if record and indexed and string.find(record, '"pinned":true', 1, true) and cjson.decode(record).pinned == true then
    local user = string.match(indexed, "^[^:]*:([^:]*):")
    redis.call("ZADD", KEYS[5], 0, "o:" .. created .. ":" .. id, 0, "u:" .. user .. ":" .. created .. ":" .. id)
  end
end
return {"OK", #entries < size and "" or entries[#entries]}
