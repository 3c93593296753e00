--[[
  Reads a run of consecutive seqs of one session together with its bounds, in
  one atomic step, so events and (headSeq, firstSeq) always agree. Events sit
  in a hash under consecutive seqs, so a run is one HMGET: O(k).

  KEYS[1] session hash   KEYS[2] events hash

  ARGV[1] "asc" (after a cursor) or "desc" (newest first, before a cursor)
  ARGV[2] cursor: asc: after this seq ("" = before the oldest retained);
          desc: before this seq ("" = after the head)
  ARGV[3] max events to return   ARGV[4] max seqs to look at
  ARGV[5] number of event types to keep (0 = all), then the types

  Replies {"NOT_FOUND"}
        | {"OK", head, first, last seq looked at, incarnation, then seq, encoded event ...}
  An asc cursor outside [first - 1, head] returns no events: the caller
  applies the shared cursor rule to the bounds.
]]
--- @include "frames"

local s = redis.call("HMGET", KEYS[1], "head", "first", "inc")
if not s[1] then
  return {"NOT_FOUND"}
end
local head, first = tonumber(s[1]), tonumber(s[2])
local incarnation = s[3] or ""
local limit, budget = tonumber(ARGV[3]), tonumber(ARGV[4])

local types = nil
local ntypes = tonumber(ARGV[5])
if ntypes > 0 then
  types = {}
  for i = 1, ntypes do
    types[ARGV[5 + i]] = true
  end
end

local from, to, step
if ARGV[1] == "asc" then
  local after = first - 1
  if ARGV[2] ~= "" then
    after = tonumber(ARGV[2])
  end
  if after < first - 1 or after > head then
    return {"OK", head, first, after, incarnation}
  end
  from, to, step = after + 1, math.min(head, after + budget), 1
else
  local before = head + 1
  if ARGV[2] ~= "" then
    before = math.min(tonumber(ARGV[2]), head + 1)
  end
  from, to, step = before - 1, math.max(first, before - budget), -1
end

local reply = {"OK", head, first, from - step, incarnation}
if (step == 1 and from > to) or (step == -1 and from < to) then
  return reply
end
local seqs = {}
for seq = from, to, step do
  seqs[#seqs + 1] = seq
end
local values = redis.call("HMGET", KEYS[2], unpack(seqs))
local count = 0
for i = 1, #seqs do
  reply[4] = seqs[i]
  local v = values[i]
  if v then
    local keep = true
    if types then
      -- The event type is the encoding's first frame.
      keep = types[(readFrame(v, 1))] == true
    end
    if keep then
      reply[#reply + 1] = seqs[i]
      reply[#reply + 1] = v
      count = count + 1
      if count >= limit then
        break
      end
    end
  end
end
return reply
