--[[
  Gives one app's existing memories their documents for the Redis Query
  Engine (src/store/memories/redis.ts says the layout), a page per call,
  while writes go on: the upgrade of memories stored before documents, or
  after a change an older release made.

  The app's documents are complete while meta "docready" names the latest
  build ("docbuild") and "docchain" equals the app's stamp, "<seq>:<memories
  in order>": every memory stored before the build began got its document,
  and every change since was made by a script that keeps them (write-n.lua,
  delete-11.lua), since each of those extends the chain only when it finds it
  intact. A change by a script that does not (an older release, during a
  rolling upgrade) leaves the chain behind the stamp: readers rank in process
  until a new build completes the documents.

  KEYS[1] records   KEYS[2] validity   KEYS[3] order   KEYS[4] meta
  KEYS[5] the pinned index of releases before documents (removed)
  ARGV[1] "begin", "page" or "finish"   ARGV[2] the build's token (unique per build)
  "begin": ARGV[3] "resume" to continue a build whose chain is intact.
  "page": ARGV[3] the order entry the page ended at ("" after the last
  page), ARGV[4] the app's document key prefix, ARGV[5] m, then 3 per
  memory: hex id, document fields (JSON), vector (FLOAT32 bytes or "").
  "prune": ARGV[3] the app's document key prefix, ARGV[4] m, then m hex ids.

  "begin" starts the chain at the app's stamp and replies {"OK", the order
  entry to resume after ("" from the start)}: a build interrupted (its
  replica died) is resumed where its last page ended while the chain is
  intact. "page" writes the documents of the memories still stored (their
  validity read here, so a supersession meanwhile is not undone) and records
  how far the build got, or replies {"ABORTED"} once another build has
  begun; "finish" marks the documents complete if no other build began
  meanwhile. "prune" deletes the documents of those memories that are gone
  (an older release deleted them), whichever build runs.
]]
--- @include "stamp"
local meta, mode, token = KEYS[4], ARGV[1], ARGV[2]
if mode == "begin" then
  redis.call("DEL", KEYS[5])
  local build, chain, at = unpack(redis.call("HMGET", meta, "docbuild", "docchain", "docat"))
  local now = appStamp(meta, KEYS[3])
  local resume = ARGV[3] == "resume" and build and chain == now and at or ""
  redis.call("HDEL", meta, "docready", "pinready", "pinbuild", "pinchain")
  redis.call("HSET", meta, "docbuild", token, "docchain", now, "docat", resume)
  return {"OK", resume}
end
if mode == "prune" then
  for i = 1, tonumber(ARGV[4]) do
    if redis.call("HEXISTS", KEYS[1], ARGV[4 + i]) == 0 then redis.call("DEL", ARGV[3] .. ARGV[4 + i]) end
  end
  return {"OK"}
end
if redis.call("HGET", meta, "docbuild") ~= token then return {"ABORTED"} end
if mode == "finish" then
  redis.call("HSET", meta, "docready", token)
  return {"OK"}
end
local prefix, m = ARGV[4], tonumber(ARGV[5])
for i = 1, m do
  local id = ARGV[3 + 3 * i]
  local validity = redis.call("HGET", KEYS[2], id)
  if validity and redis.call("HEXISTS", KEYS[1], id) == 1 then writeDocument(prefix .. id, ARGV[4 + 3 * i], validity, ARGV[5 + 3 * i]) end
end
redis.call("HSET", meta, "docat", ARGV[3])
return {"OK"}
