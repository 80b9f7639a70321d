/**
 * CPU time for the benchmarks, µs: of another process (squid, mitmproxy),
 * or of this one (forgekit's proxy runs in the bench process).
 *
 * @module
 */
import process from "node:process";

/**
 * CPU time of a process, µs: the sum of its threads' run time from
 * `/proc/<pid>/task/<tid>/schedstat` (nanoseconds), or else user + system
 * time from `/proc/<pid>/stat` (clock ticks of 10 ms, too coarse for 500
 * requests of about 100 µs each).
 */
export function procCpu(pid: number): number {
  try {
    let ns = 0;
    for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
      ns += Number(Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/schedstat`).split(" ")[0]);
    }
    if (ns > 0) return ns / 1000;
  } catch {
    // no schedstat (a kernel without CONFIG_SCHED_INFO): ticks below
  }
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** This process's CPU time, µs: forgekit runs in it (curl and the origin do not). */
export function ownCpu(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}
