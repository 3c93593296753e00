--[[
  Clears the record of an erasure in progress once that erasure has finished,
  unless another erasure of the same user started meanwhile (it replaced the
  token): that one clears the record when it finishes, and until then a
  replica that finds the record runs the erasure again.

  KEYS[1] erasures in progress (hash: "<hex app>:<hex user>" -> token)
  ARGV[1] the field   ARGV[2] the token this erasure wrote

  Replies 1 when it cleared the record, 0 otherwise.
]]
if redis.call("HGET", KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call("HDEL", KEYS[1], ARGV[1])
end
return 0
