-- cli_filter.lua -- memest's admission check at submit time (docs/slurm.md).
--
-- Slurm's cli_filter/lua plugin runs this in sbatch, salloc and srun on the submit host, as the
-- submitting user, before the job reaches slurmctld (slurm.conf: CliFilterPlugins=cli_filter/lua;
-- this file next to slurm.conf). For a job whose --comment declares its model
-- ("memest:model=PATH,batch=N,...") it runs memest-admit, which runs memest against the GPU type
-- the job asks for and answers accept, warn, reject, or a rewritten GPU request.
--
-- A job without the declaration is passed untouched (no process is started). memest-admit is
-- bounded by HELPER_TIMEOUT seconds; if it hangs, crashes or answers nothing, the job goes
-- through with a warning: the check never blocks a submission because of itself.
--
-- slurm/install.sh writes the three values below; edit them there or here.
local MEMEST_ADMIT = "@MEMEST_ADMIT@"
local CONFIG = "@MEMEST_ADMISSION_CONF@"
local HELPER_TIMEOUT = @MEMEST_HELPER_TIMEOUT@

local GPU_OPTIONS = { "gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket" }

local function quote(s)
  return "'" .. (string.gsub(s, "'", "'\\''")) .. "'"
end

local function say(text)
  io.stderr:write(text .. "\n")
end

-- Warnings of the plugin itself (memest-admit logs its own decisions) go to syslog.
local function log_warning(text)
  os.execute("logger -t memest-admit -p user.warning " .. quote(text) .. " >/dev/null 2>&1")
end

local function has_declaration(comment)
  if comment == nil then return false end
  return string.find(comment, "^memest:") ~= nil or string.find(comment, "[%s;]memest:") ~= nil
end

function slurm_cli_setup_defaults(options, early_pass)
  return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pass)
  local comment = options["comment"]
  if not has_declaration(comment) then
    return slurm.SUCCESS  -- no declaration: untouched
  end
  -- A step inside an existing allocation (srun in a batch script) was checked with its job.
  if options["type"] == "srun" and os.getenv("SLURM_JOB_ID") ~= nil then
    return slurm.SUCCESS
  end

  local cmd = "timeout -k 1 " .. HELPER_TIMEOUT .. " " .. quote(MEMEST_ADMIT) ..
              " --protocol --config " .. quote(CONFIG) .. " --comment " .. quote(comment)
  for _, name in ipairs(GPU_OPTIONS) do
    local value = options[name]
    if value ~= nil and value ~= "" then
      cmd = cmd .. " --" .. name .. " " .. quote(value)
    end
  end
  local workdir = options["chdir"]
  if workdir ~= nil and workdir ~= "" then
    cmd = cmd .. " --workdir " .. quote(workdir)
  end
  local job_name = options["job-name"]
  if job_name ~= nil then
    cmd = cmd .. " --job-name " .. quote(job_name)
  end
  cmd = cmd .. " 2>&1"

  local pipe = io.popen(cmd, "r")
  if pipe == nil then
    say("memest: warning: the admission check could not start " .. MEMEST_ADMIT ..
        "; the job is let through unchecked")
    log_warning("could not start " .. MEMEST_ADMIT)
    return slurm.SUCCESS
  end
  local action = nil
  local messages = {}
  local sets = {}
  local other = {}
  for line in pipe:lines() do
    local key, value = string.match(line, "^([%w%.%-]+)=(.*)$")
    if key == "action" then
      action = value
    elseif key == "message" then
      table.insert(messages, value)
    elseif key ~= nil and string.sub(key, 1, 4) == "set." then
      table.insert(sets, { string.sub(key, 5), value })
    else
      table.insert(other, line)
    end
  end
  pipe:close()

  if action ~= "accept" and action ~= "warn" and action ~= "reject" then
    local why = other[#other] or "no answer"
    say("memest: warning: the admission check did not answer within " .. HELPER_TIMEOUT ..
        " s or failed (" .. why .. "); the job is let through unchecked")
    log_warning("no verdict from " .. MEMEST_ADMIT .. " (" .. why .. "); job let through")
    return slurm.SUCCESS
  end
  for _, m in ipairs(messages) do
    say(m)
  end
  if action == "reject" then
    return slurm.ERROR
  end
  for _, kv in ipairs(sets) do
    options[kv[1]] = kv[2]
  end
  return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
  return slurm.SUCCESS
end
