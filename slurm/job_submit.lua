-- gpu-mem-quota: GPU memory as a Slurm resource, for slurmctld's job_submit/lua plugin.
--
-- Install next to slurm.conf as job_submit.lua, with `JobSubmitPlugins=lua` in slurm.conf. Each GPU
-- is cut into shards of one memory unit (gres.conf: `Name=shard Count=80 File=/dev/nvidia0` for an
-- 80G GPU and a 1G unit), and the unit is the policy's `[scheduling] shard_unit`. At submission,
-- here in slurmctld where no user can bypass it, a job's --gpu-mem-quota becomes its shards:
--
--   --gpu-mem-quota=Q, no GPU asked for           -> shard:ceil(Q / unit) added to its GRES
--   --gpu-mem-quota=Q with --gres=gpu:N (--gpus..) -> unchanged: whole GPUs, Q caps each
--   --gpu-mem-quota=Q with --gres=shard:N          -> unchanged when N = ceil(Q / unit), else refused
--   --gres=shard:N alone                           -> unchanged (the node gives it an N x unit quota)
--   no [scheduling] shard_unit in the policy       -> every job unchanged (shards are not memory)
--
-- Whether Q is within the user's cap is the SPANK plugin's check (on the login node, and again on the
-- compute node, which also lowers a quota above the job's shards x unit). docs/SCHEDULING.md.

local POLICY = "/etc/slurm/gpu-mem-quota.toml"

-- The SPANK option as sbatch/srun/salloc pass it on in the job's spank_job_env.
local OPTION = "_SLURM_SPANK_OPTION_gpu_mem_quota_gpu_mem_quota="
-- slurm_errno.h (22.05 and 24.11 alike); the Lua table has no name for it.
local ESLURM_INVALID_GRES = 2072

local M = {}

local KIB, MIB = 1024, 1024 * 1024
local LIMIT = 1024 * 1024 * 1024 * 1024 * 1024 -- 1 PiB, as --gpu-mem-quota
local SUFFIX = { [""] = MIB, K = KIB, M = MIB, G = 1024 * MIB, T = 1024 * 1024 * MIB }

-- Slurm's --mem syntax, as the plugin reads it: a whole number, an optional binary suffix K M G T
-- (or KiB ... TiB), a bare number is MiB. Bytes, or nil and why not.
function M.parse_size(text)
    local digits, suffix = string.match(text, "^(%d+)(%a*)$")
    if not digits then
        return nil, "not a size; expected a whole number with an optional K, M, G or T suffix (e.g. 40G)"
    end
    local letter = string.match(suffix, "^([KMGT])iB$") or suffix
    local scale = SUFFIX[letter]
    if not scale then
        return nil, "unknown suffix '" .. suffix .. "'; use K, M, G or T (binary, as in --mem)"
    end
    local bytes = tonumber(digits) * scale
    if bytes == 0 then
        return nil, "a quota must be above 0"
    end
    if #digits > 16 or bytes > LIMIT then
        return nil, "above 1 PiB"
    end
    return bytes
end

-- The policy's [scheduling] shard_unit, in bytes; nil when the policy sets none (shards are then not
-- memory units, and jobs are left as they are). Read line by line: the table header and one
-- `key = "value"` line, as etc/gpu-mem-quota.toml writes them; `gpu-mem-quota check-config` checks
-- the whole file. Second value: an error to log (unreadable file, bad unit).
function M.shard_unit(text)
    local table_name
    for line in string.gmatch(text, "[^\n]*") do
        local header = string.match(line, "^%s*%[%s*([%w_%.%-\"]+)%s*%]%s*$")
        if header then
            table_name = header
        elseif table_name == "scheduling" then
            local value = string.match(line, "^%s*shard_unit%s*=%s*\"([^\"]*)\"%s*$")
                or string.match(line, "^%s*shard_unit%s*=%s*\"([^\"]*)\"%s*#")
            if value then
                local bytes, why = M.parse_size(value)
                if not bytes then
                    return nil, "[scheduling] shard_unit '" .. value .. "': " .. why
                end
                return bytes
            end
        end
    end
    return nil
end

local function read_policy_unit(path)
    local file, err = io.open(path, "r")
    if not file then
        return nil, "cannot read the policy " .. path .. ": " .. tostring(err)
    end
    local text = file:read("*a")
    file:close()
    local unit, why = M.shard_unit(text or "")
    if why then
        return nil, path .. ": " .. why
    end
    return unit
end

-- The raw --gpu-mem-quota value from spank_job_env (a table indexed from 0, read-only), or nil.
-- Control characters become '?' and the value is cut at 64 bytes: it goes into slurmctld's log and
-- the user's messages, and only the plugin's own sbatch guarantees a clean one.
function M.quota_option(env, size)
    if env == nil then
        return nil
    end
    local found
    for i = 0, (tonumber(size) or 0) - 1 do
        local entry = env[i]
        if type(entry) == "string" and string.sub(entry, 1, #OPTION) == OPTION then
            found = string.sub(entry, #OPTION + 1)
        end
    end
    if found then
        found = string.sub(string.gsub(found, "%c", "?"), 1, 64)
    end
    return found
end

-- A GRES count: digits with an optional k/m/g (x1024) suffix, as Slurm takes them.
local function gres_count(text)
    local digits, suffix = string.match(text, "^(%d+)([kKmMgG]?)$")
    if not digits then
        return nil
    end
    local scale = ({ [""] = 1, k = 1024, m = 1024 ^ 2, g = 1024 ^ 3 })[string.lower(suffix)]
    return tonumber(digits) * scale
end

-- The entries of a tres_per_* string ("gres:gpu:fake:1,gres:shard:40" in 22.05,
-- "gres/shard:40" from 23.02 on): each as written without its "gres:"/"gres/" prefix, its name, its
-- count (1 when the entry gives none; nil when the count is unreadable).
function M.gres_entries(tres)
    local entries = {}
    if tres == nil or tres == "" then
        return entries
    end
    for item in string.gmatch(tres, "[^,]+") do
        local bare = string.gsub(item, "^gres[:/]", "")
        local fields = {}
        for field in string.gmatch(bare, "[^:]+") do
            table.insert(fields, field)
        end
        local count = 1
        if #fields > 1 then
            count = gres_count(fields[#fields])
            if count == nil and #fields == 2 then
                count = 1 -- name:type
            end
        end
        table.insert(entries, { text = bare, name = fields[1], count = count })
    end
    return entries
end

local function find(entries, name)
    for _, entry in ipairs(entries) do
        if entry.name == name then
            return entry
        end
    end
end

local function unit_text(unit)
    for _, letter in ipairs({ "T", "G", "M" }) do
        if unit % SUFFIX[letter] == 0 then
            return tostring(unit / SUFFIX[letter]) .. letter
        end
    end
    return tostring(unit / KIB) .. "K"
end

-- The decision, from plain values: job = { quota = raw option value or nil, unit = bytes or nil,
-- tres_per_node, tres_per_job, tres_per_socket, tres_per_task = strings or nil }.
-- Returns { action = "keep" }, { action = "set", gres = "..." } (the whole new GRES list, without
-- prefixes: Slurm's `gres` field adds its own version's), or { action = "refuse", message = "..." }.
function M.decide(job)
    if job.unit == nil or job.quota == nil then
        return { action = "keep" }
    end
    local quota, why = M.parse_size(job.quota)
    if not quota then
        return {
            action = "refuse",
            message = "invalid --gpu-mem-quota '" .. job.quota .. "': " .. why,
        }
    end
    local per_node = M.gres_entries(job.tres_per_node)
    for _, field in ipairs({ "tres_per_job", "tres_per_socket", "tres_per_task" }) do
        local entries = M.gres_entries(job[field])
        if find(entries, "gpu") then
            return { action = "keep" } -- whole GPUs (--gpus, --gpus-per-socket, --gpus-per-task)
        end
        if find(entries, "shard") then
            return {
                action = "refuse",
                message = "--gpu-mem-quota with shards asked per job, socket or task: ask for GPU memory "
                    .. "per node, with --gpu-mem-quota alone or with a matching --gres=shard:N",
            }
        end
    end
    if find(per_node, "gpu") then
        return { action = "keep" }
    end
    local unit = unit_text(job.unit)
    local wanted = math.ceil(quota / job.unit)
    local shard = find(per_node, "shard")
    if shard then
        if shard.count == wanted then
            return { action = "keep" }
        end
        local asked = shard.count and ("--gres=shard:" .. shard.count .. " reserves " .. shard.count .. " x " .. unit)
            or ("--gres=" .. shard.text .. " is not a shard count")
        return {
            action = "refuse",
            message = asked .. " of GPU memory but --gpu-mem-quota=" .. job.quota .. " needs shard:" .. wanted
                .. " (1 shard = " .. unit .. "): give one of the two, or make them agree",
        }
    end
    local gres = {}
    for _, entry in ipairs(per_node) do
        table.insert(gres, entry.text)
    end
    table.insert(gres, "shard:" .. wanted)
    return { action = "set", gres = table.concat(gres, ",") }
end

-- Decides `tres` (the GRES fields) against `quota` and the policy's unit, and applies the verdict to
-- `job_desc`: refused (ESLURM_INVALID_GRES, told to the user), shards set, or left as it is. `says`
-- words the log lines: { unusable = ..., refused = ..., set = ... }, each formatted with the uid.
local function translate(job_desc, quota, tres, uid, policy_path, says)
    local unit, err = read_policy_unit(policy_path)
    if err then
        -- The compute node still holds the job to its quota; only the scheduling is lost.
        slurm.log_error("gpu-mem-quota: %s; " .. says.unusable, err, uid)
        return slurm.SUCCESS
    end
    local verdict = M.decide({
        quota = quota,
        unit = unit,
        tres_per_node = tres.tres_per_node,
        tres_per_job = tres.tres_per_job,
        tres_per_socket = tres.tres_per_socket,
        tres_per_task = tres.tres_per_task,
    })
    if verdict.action == "refuse" then
        slurm.log_user("gpu-mem-quota: %s", verdict.message)
        slurm.log_info("gpu-mem-quota: " .. says.refused .. ": %s", uid, verdict.message)
        return ESLURM_INVALID_GRES
    end
    if verdict.action == "set" then
        slurm.log_info("gpu-mem-quota: " .. says.set .. ": --gpu-mem-quota=%s -> --gres=%s", uid, quota, verdict.gres)
        job_desc.gres = verdict.gres
    end
    return slurm.SUCCESS
end

local TRES_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }

function M.job_submit(job_desc, uid, policy_path)
    local quota = M.quota_option(job_desc.spank_job_env, job_desc.spank_job_env_size)
    if quota == nil then
        return slurm.SUCCESS
    end
    return translate(job_desc, quota, job_desc, uid, policy_path, {
        unusable = "job of uid %s submitted without GPU-memory scheduling",
        refused = "refused a job of uid %s",
        set = "job of uid %s",
    })
end

-- `scontrol update` of a pending job's GRES (its owner may make one, review G10): held to the job's
-- --gpu-mem-quota as at submission. Shards that disagree are refused; a GRES list without shards
-- gets them. Root's change is the admin's to make. The compute node holds the job to its shards x unit
-- either way.
function M.job_modify(job_desc, job_rec, uid, policy_path)
    local tres, changed = {}, false
    for _, field in ipairs(TRES_FIELDS) do
        changed = changed or job_desc[field] ~= nil
        tres[field] = job_desc[field] or job_rec[field]
    end
    if not changed or tonumber(uid) == 0 then
        return slurm.SUCCESS
    end
    local quota = M.quota_option(job_rec.spank_job_env, job_rec.spank_job_env_size)
    if quota == nil then
        return slurm.SUCCESS
    end
    return translate(job_desc, quota, tres, uid, policy_path, {
        unusable = "GRES change of a job of uid %s let through",
        refused = "refused a GRES change by uid %s",
        set = "GRES change by uid %s",
    })
end

-- What slurmctld calls.
function slurm_job_submit(job_desc, part_list, submit_uid)
    return M.job_submit(job_desc, submit_uid, POLICY)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return M.job_modify(job_desc, job_rec, modify_uid, POLICY)
end

return M
