-- An app's stamp, "<seq>:<memories in order>" (meta's change number and the
-- order index's count): what the documents' chain is compared with
-- (docs-5.lua says why both), as redis.ts's stampFrom reads it.
local function appStamp(meta, order) return (redis.call("HGET", meta, "seq") or "0") .. ":" .. redis.call("ZCARD", order) end
-- Writes a memory's document for the Redis Query Engine (redis.ts says its
-- fields): the fields the driver computed (JSON), its validity as stored
-- ("<from>:<until or empty>:..."), and its vector (FLOAT32 bytes, or "").
local function writeDocument(doc, fields, validity, vector)
  local from, untilAt = string.match(validity, "^([^:]*):([^:]*):")
  local args = {"valid_from", from, "invalid_at", untilAt == "" and "inf" or untilAt}
  for name, value in pairs(cjson.decode(fields)) do
    args[#args + 1] = name
    args[#args + 1] = value
  end
  if vector ~= "" then
    args[#args + 1] = "vec"
    args[#args + 1] = vector
  end
  redis.call("HSET", doc, unpack(args))
end
