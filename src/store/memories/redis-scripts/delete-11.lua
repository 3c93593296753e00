--[[
  Removes memories of one app with their index entries, atomically, and
  publishes what it removed (src/store/memories/redis.ts says the layout).

  KEYS[1] records   KEYS[2] validity   KEYS[3] index entries   KEYS[4] order
  KEYS[5] by user   KEYS[6] groups   KEYS[7] held   KEYS[8] embeddings
  KEYS[9] vectors   KEYS[10] meta   KEYS[11] change log
  ARGV[1] notice channel   ARGV[2] origin   ARGV[3] n
  then 2 per memory: hex id, and the index entry it must still have, or ""
  for any (a deletion by scope passes the entry it selected, so a memory
  written again meanwhile under the same id, maybe in another scope, stays);
  then the changes the app's log retains, and the command that publishes
  the notice ("PUBLISH" on one node, "SPUBLISH" to the app's channel on a
  cluster).

  The deletion is one change of the app: numbered (meta "seq") and logged as
  "<seq>:d:<JSON of [memory id, user, agent, session] per memory>", its
  memories' ids and scope only. Their documents go with them, and the
  app's documents stay complete if they were (meta "docchain", as in
  write-n.lua).

  Replies {notice} when it removed any ({} otherwise); the notice lists each
  removed memory as [record, validity, embedding or null], and "q" is the
  change number.
]]
local channel, origin, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local retained, publish, docs = tonumber(ARGV[4 + 2 * n]), ARGV[5 + 2 * n], ARGV[6 + 2 * n]
local removed, stubs = {}, {}
--- @include "stamp"
local chained = docs ~= "" and redis.call("HGET", KEYS[10], "docchain") == appStamp(KEYS[10], KEYS[4])
for i = 1, n do
  local id, expected = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local entry = redis.call("HGET", KEYS[3], id)
  if entry and (expected == "" or expected == entry) then
    local created, user, group, from = string.match(entry, "^([^:]*):([^:]*):([^:]*):([^:]*):")
    local record = redis.call("HGET", KEYS[1], id)
    local r = cjson.decode(record)
    stubs[#stubs + 1] = {r.memoryId, r.userId or cjson.null, r.agentId or cjson.null, r.sessionId or cjson.null}
    removed[#removed + 1] = "[" .. record .. ',"' .. redis.call("HGET", KEYS[2], id) .. '",' .. (redis.call("HGET", KEYS[8], id) or "null") .. "]"
    redis.call("HDEL", KEYS[1], id)
    redis.call("HDEL", KEYS[2], id)
    redis.call("HDEL", KEYS[3], id)
    redis.call("HDEL", KEYS[8], id)
    redis.call("HDEL", KEYS[9], id)
    redis.call("ZREM", KEYS[4], created .. ":" .. id)
    redis.call("ZREM", KEYS[5], user .. ":" .. created .. ":" .. id)
    if docs ~= "" then redis.call("DEL", docs .. id) end
    if group ~= "" then
      redis.call("ZREM", KEYS[6], group .. ":" .. from .. ":" .. id)
      redis.call("ZREM", KEYS[7], group .. ":" .. from .. ":" .. id)
    end
  end
end
if #removed == 0 then return {} end
local seq = redis.call("HINCRBY", KEYS[10], "seq", 1)
if chained then redis.call("HSET", KEYS[10], "docchain", appStamp(KEYS[10], KEYS[4])) end
redis.call("ZADD", KEYS[11], seq, seq .. ":d:" .. cjson.encode(stubs))
redis.call("ZREMRANGEBYSCORE", KEYS[11], "-inf", seq - retained)
local notice = '{"o":"' .. origin .. '","q":' .. seq .. ',"d":[' .. table.concat(removed, ",") .. "]}"
redis.call(publish, channel, notice)
return {notice}
