-- An app's stamp, "<seq>:<memories in order>" (meta's change number and the
-- order index's count): what the pinned index's chain is compared with
-- (pinned-5.lua says why both), as redis.ts's stampFrom reads it.
local function appStamp(meta, order) return (redis.call("HGET", meta, "seq") or "0") .. ":" .. redis.call("ZCARD", order) end
