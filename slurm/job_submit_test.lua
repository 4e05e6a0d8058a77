-- Unit tests of slurm/job_submit.lua's decisions, run by crates/node/tests/integration/job_submit_lua.rs (lua5.1, the Lua
-- Debian's job_submit_lua.so links). Exits 1 on the first failure, naming it.

local here = string.match(arg[0], "^(.*)/[^/]*$") or "."
local log = {}
slurm = {
    SUCCESS = 0,
    ERROR = -1,
    log_user = function(fmt, ...) table.insert(log, "user: " .. string.format(fmt, ...)) end,
    log_info = function(fmt, ...) table.insert(log, "info: " .. string.format(fmt, ...)) end,
    log_error = function(fmt, ...) table.insert(log, "error: " .. string.format(fmt, ...)) end,
}
local M = dofile(here .. "/job_submit.lua")
local G = 1024 * 1024 * 1024
local OPTION_FOR_TEST = "_SLURM_SPANK_OPTION_gpu_mem_quota_gpu_mem_quota="

local failures = 0
local function check(name, got, want)
    if got ~= want then
        io.stderr:write(string.format("FAIL %s: got %s, want %s\n", name, tostring(got), tostring(want)))
        failures = failures + 1
    end
end

local function decide(job)
    job.unit = job.unit or G
    return M.decide(job)
end

-- Sizes as --gpu-mem-quota reads them.
check("40G", M.parse_size("40G"), 40 * G)
check("40GiB", M.parse_size("40GiB"), 40 * G)
check("bare MiB", M.parse_size("512"), 512 * 1024 * 1024)
check("40GB refused", M.parse_size("40GB"), nil)
check("1.5G refused", M.parse_size("1.5G"), nil)
check("0 refused", M.parse_size("0"), nil)
check("2P refused", M.parse_size("2048T"), nil)

-- A quota and no GPU: shards added, other GRES kept, rounded up to whole units.
local v = decide({ quota = "40G" })
check("quota alone", v.action .. " " .. tostring(v.gres), "set shard:40")
v = decide({ quota = "1536M", tres_per_node = "gres:nic:2" })
check("other gres kept (22.05 form)", v.gres, "nic:2,shard:2")
v = decide({ quota = "10G", tres_per_node = "gres/nic:1,gres/fpga:xilinx:2" })
check("other gres kept (24.11 form)", v.gres, "nic:1,fpga:xilinx:2,shard:10")
v = decide({ quota = "40G", unit = 2 * G })
check("2G unit", v.gres, "shard:20")

-- Whole GPUs: unchanged, however they are asked for.
check("--gres=gpu:1", decide({ quota = "40G", tres_per_node = "gres:gpu:fake:1" }).action, "keep")
check("--gpus=2", decide({ quota = "40G", tres_per_job = "gres:gpu:2" }).action, "keep")
check("--gpus-per-task", decide({ quota = "40G", tres_per_task = "gres/gpu:1" }).action, "keep")
-- --gpus-per-node=1 reaches slurmctld as tres_per_node "gres/gpu:1", as --gres=gpu:1 does: 26.05's
-- sbatch refuses the two together itself (slurm_opt.c), and this never adds a gpu entry to either.
check("--gpus-per-node", decide({ quota = "40G", tres_per_node = "gres/gpu:1" }).action, "keep")
check("--gpus-per-node and other gres", decide({ quota = "40G", tres_per_node = "gres/nic:1,gres/gpu:2" }).action, "keep")

-- Explicit shards: agreeing ones pass, others are refused with both numbers.
check("agreeing shards", decide({ quota = "40G", tres_per_node = "gres:shard:40" }).action, "keep")
v = decide({ quota = "40G", tres_per_node = "gres:shard:20" })
check("disagreeing shards", v.action, "refuse")
check(
    "refusal text",
    v.message,
    "--gres=shard:20 reserves 20 x 1G of GPU memory but --gpu-mem-quota=40G needs shard:40 "
        .. "(1 shard = 1G): give one of the two, or make them agree"
)
check("shards per task", decide({ quota = "4G", tres_per_task = "gres:shard:4" }).action, "refuse")

-- Nothing to translate: no quota, no unit, or a value sbatch's plugin would have refused.
check("shards alone", decide({ tres_per_node = "gres:shard:20" }).action, "keep")
check("no unit", M.decide({ quota = "40G" }).action, "keep")
v = decide({ quota = "40GB" })
check("forged value", v.action, "refuse")
check("forged value text", string.find(v.message, "invalid --gpu-mem-quota '40GB'", 1, true), 1)

-- The policy's unit: only in [scheduling], comments and other tables ignored.
check("unit", M.shard_unit('[x]\nshard_unit = "2G"\n[scheduling]\n# shard_unit = "4G"\nshard_unit = "1G" # one\n'), G)
check("no unit", M.shard_unit('[defaults]\nmax = "40G"\n'), nil)
local unit, why = M.shard_unit('[scheduling]\nshard_unit = "1GB"\n')
check("bad unit", unit, nil)
check("bad unit says why", string.find(why, "[scheduling] shard_unit '1GB'", 1, true), 1)

-- The option in spank_job_env: indexed from 0.
local env = { [0] = "_SLURM_SPANK_OPTION_gpu_mem_quota_gpu_mem_quota=40G", [1] = "OTHER=1" }
check("option at 0", M.quota_option(env, 2), "40G")
check("no env", M.quota_option(nil, 0), nil)
check("other plugin's option", M.quota_option({ [0] = "_SLURM_SPANK_OPTION_x_gpu_mem_quota=1G" }, 1), nil)

-- The whole call, with a policy file.
local path = os.tmpname()
local file = assert(io.open(path, "w"))
file:write('[scheduling]\nshard_unit = "1G"\n')
file:close()
local job = { spank_job_env = env, spank_job_env_size = 2, tres_per_node = "gres:nic:1" }
check("submit rc", M.job_submit(job, 2001, path), 0)
check("submit gres", job.gres, "nic:1,shard:40")
job = { spank_job_env = env, spank_job_env_size = 2, tres_per_node = "gres:shard:8" }
check("refused rc", M.job_submit(job, 2001, path), 2072)
check("told the user", string.find(log[#log - 1], "user: gpu-mem-quota: --gres=shard:8", 1, true), 1)
-- G10: `scontrol update JobId=J Gres=shard:1` by the owner of a pending 40G job is refused; a GRES
-- list without shards gets the job's; a change of something else, or of a job without a quota, passes.
local rec = { spank_job_env = env, spank_job_env_size = 2, tres_per_node = "gres:shard:40" }
check("modify to 1 shard refused", M.job_modify({ tres_per_node = "gres:shard:1" }, rec, 2001, path), 2072)
check("modify told the user", string.find(log[#log - 1], "user: gpu-mem-quota: --gres=shard:1 reserves", 1, true), 1)
local change = { tres_per_node = "gres:nic:1" }
check("modify without shards rc", M.job_modify(change, rec, 2001, path), 0)
check("modify without shards gets them", change.gres, "nic:1,shard:40")
check("root's change", M.job_modify({ tres_per_node = "gres:shard:1" }, rec, 0, path), 0)
check("modify of the time limit", M.job_modify({ time_limit = 5 }, rec, 2001, path), 0)
check("modify of a job without a quota", M.job_modify({ tres_per_node = "gres:shard:1" },
    { tres_per_node = "gres:shard:8" }, 2001, path), 0)
-- A value with control characters reaches no log as it is.
check("control characters", M.quota_option({ [0] = OPTION_FOR_TEST .. "4\nG" }, 1), "4?G")
os.remove(path)
job = { spank_job_env = env, spank_job_env_size = 2 }
check("policy missing: submitted", M.job_submit(job, 2001, path), 0)
check("policy missing: unchanged", job.gres, nil)
check("policy missing: logged", string.find(log[#log], "error: gpu-mem-quota: cannot read the policy", 1, true), 1)

if failures > 0 then
    os.exit(1)
end
print("job_submit.lua: all checks passed")
