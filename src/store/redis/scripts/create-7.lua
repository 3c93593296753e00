--[[
  Creates a session, or returns the existing one (getOrCreate), atomically:
  the existence check and the insert cannot interleave with another replica.

  KEYS[1] session hash        KEYS[2] sessions by updatedAt (zset)
  KEYS[3] stats hash          KEYS[4] index: all sessions (zset, score 0)
  KEYS[5] index: per app      KEYS[6] index: per user
  KEYS[7] index: per app + user

  ARGV[1] session id   ARGV[2] app name   ARGV[3] user id
  ARGV[4] metadata (JSON)   ARGV[5] now (epoch ms)
  ARGV[6] "create" (ALREADY_EXISTS when taken) or "get" (return the existing one)
  ARGV[7] the new session's incarnation (base64url)

  Replies {"EXISTS"} | {"FOUND", <HGETALL of the session>} | {"CREATED", <total sessions>}
]]
if redis.call("EXISTS", KEYS[1]) == 1 then
  if ARGV[6] == "create" then
    return {"EXISTS"}
  end
  return {"FOUND", redis.call("HGETALL", KEYS[1])}
end

redis.call("HSET", KEYS[1],
  "app", ARGV[2], "user", ARGV[3], "meta", ARGV[4],
  "created", ARGV[5], "updated", ARGV[5], "head", 0, "first", 1, "inc", ARGV[7])
redis.call("ZADD", KEYS[2], ARGV[5], ARGV[1])
for i = 4, 7 do
  redis.call("ZADD", KEYS[i], 0, ARGV[1])
end
local total = redis.call("HINCRBY", KEYS[3], "sessions", 1)
return {"CREATED", total}
