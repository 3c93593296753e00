--[[
  Length-prefixed frames, "<byte length>:<bytes>": the event type and id at
  the start of an encoded event, and the events a notice carries. The
  TypeScript side is src/store/redis/codec.ts; both agree byte for byte.
]]
-- The frame starting at `pos` of `v`: its text and the position after it.
local function readFrame(v, pos)
  local colon = string.find(v, ":", pos, true)
  local len = tonumber(string.sub(v, pos, colon - 1))
  return string.sub(v, colon + 1, colon + len), colon + len + 1
end

-- `text` as one frame.
local function frame(text)
  return #text .. ":" .. text
end
