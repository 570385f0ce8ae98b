-- release_fn.lua: the release logic shared by release.lua and claim.lua (prepended to both
-- by the Go code; not a script on its own).
--
-- release_keys(due, lease, held, dirty, totalkey, try, depth, idle, owner, total, args, first)
-- releases the keys described by args[first..] in groups of six (key, mode, at, state,
-- fence, depth bucket) — see release.lua for the modes — and returns {1 per key released, 0 per key this
-- owner no longer held} and the number of emptied keys whose total_outflow slot was unused
-- (given back to `totalkey` when total > 0; a partitioned rule, whose meter lives in another
-- slot, passes total = 0 and gives them back itself). A key is held by `owner` under fence F when its `held` entry reads
-- "<owner>#<F> <next>" (claim.lua); a release with fence 0 checks only the owner.
--
-- It also keeps the ingress's per-key depth counter (admit.lua) in step: "next" counts
-- one message out, "empty" forgets the key. And an emptied key's claimed-but-unused slot
-- (`at` of an "empty" release) goes to `idle`, which MarkDue/admit.lua use as the earliest
-- due time of a message arriving before that slot passes. The drainer pops only once the
-- slot has come, so this only matters when the ingress's clock is behind the drainer's.
--
-- Every Redis command takes all keys of the batch at once (HMGET, ZREM, HDEL, ZADD with many
-- members): a script's cost is dominated by the number of redis.call()s, not their size.
local function release_keys(due, lease, held, dirty, totalkey, try, depth, idle, owner, total, args, first)
  local out = {}
  if #args < first then return out, 0 end
  local ks = {}
  for i = first, #args, 6 do ks[#ks + 1] = args[i] end
  local hs = redis.call('HMGET', held, unpack(ks))
  local hasdirty = redis.call('EXISTS', dirty) == 1
  local dirt = {}
  if hasdirty then dirt = redis.call('HMGET', dirty, unpack(ks)) end
  local mine, adds, tryset, trydel, counted, forgot, idles = {}, {}, {}, {}, {}, {}, {}
  local refunds = 0
  for j = 1, #ks do
    local i = first + (j - 1) * 6
    local k, mode, at, state, fence = ks[j], args[i + 1], tonumber(args[i + 2]), args[i + 3], args[i + 4]
    local dk = depth .. ':' .. args[i + 5]
    local who, tok, nxt
    if hs[j] then
      who, tok, nxt = string.match(hs[j], '^([^#%s]+)#(%S+) (%S+)$')
      nxt = tonumber(nxt)
    end
    if who ~= owner or (fence ~= '0' and fence ~= '' and tok ~= fence) then
      out[j] = 0
    else
      out[j] = 1
      mine[#mine + 1] = k
      local unused = at -- "empty": the slot the claim reserved and nobody used
      if at > nxt then nxt = at end
      if mode == 'empty' then
        -- Dropped unless MarkDue flagged it during the claim (see admit.lua); then the
        -- message that arrived may take the unused slot.
        if dirt[j] then
          if unused > 0 then nxt = unused end
          adds[#adds + 1] = nxt
          adds[#adds + 1] = k
        else
          forgot[#forgot + 1] = dk
          forgot[#forgot + 1] = k
          if at > 0 then
            idles[#idles + 1] = at
            idles[#idles + 1] = k
          end
        end
        trydel[#trydel + 1] = k
        refunds = refunds + 1
      else
        adds[#adds + 1] = nxt
        adds[#adds + 1] = k
        if mode == 'retry' then
          tryset[#tryset + 1] = k
          tryset[#tryset + 1] = state
        elseif mode == 'next' then
          trydel[#trydel + 1] = k
          counted[#counted + 1] = dk
          counted[#counted + 1] = k
        end
      end
    end
  end
  if #mine > 0 then
    redis.call('ZREM', lease, unpack(mine))
    redis.call('HDEL', held, unpack(mine))
    if hasdirty then redis.call('HDEL', dirty, unpack(mine)) end
  end
  if #adds > 0 then redis.call('ZADD', due, unpack(adds)) end
  if #trydel > 0 and redis.call('EXISTS', try) == 1 then redis.call('HDEL', try, unpack(trydel)) end
  if #tryset > 0 then redis.call('HSET', try, unpack(tryset)) end
  -- counted and forgot hold (bucket, key) pairs. An emptied key's counter is dropped with
  -- one HDEL per key: its bucket is its own.
  for c = 1, #counted, 2 do
    if redis.call('HINCRBY', counted[c], counted[c + 1], -1) <= 0 then redis.call('HDEL', counted[c], counted[c + 1]) end
  end
  for c = 1, #forgot, 2 do redis.call('HDEL', forgot[c], forgot[c + 1]) end
  if #idles > 0 then redis.call('ZADD', idle, unpack(idles)) end
  -- An emptied key did not use its total_outflow slot: give it back.
  if refunds > 0 and total > 0 then
    local tat = tonumber(redis.call('GET', totalkey) or '0')
    if tat > 0 then
      redis.call('SET', totalkey, string.format('%.0f', tat - refunds * total))
    end
  end
  return out, refunds
end
