--[[
  Members of the recent-events indexes: the session's member prefix
  ("<hex id>!", from the caller) and the seq in 16 digits, so that members
  sort by seq within a session. The TypeScript side is src/store/redis/keys.ts.
]]
local function recentMember(prefix, seq)
  return prefix .. string.format("%016d", seq)
end
