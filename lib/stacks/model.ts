/** The stored records of the stacks server (plain data, as the store returns them). */

/** A user. */
export interface UserRow {
  id: number;
  login: string;
  created_at: string;
}

/** A repository. */
export interface RepoRow {
  id: number;
  owner_id: number;
  owner_login: string;
  name: string;
  private: boolean;
  allow_stacked_pull_requests: boolean;
  default_branch: string;
  created_at: string;
  updated_at: string;
}

/** A branch (a `refs/heads/…` reference). */
export interface BranchRow {
  repo_id: number;
  name: string;
  sha: string;
}

/** A pull request. */
export interface PullRow {
  id: number;
  repo_id: number;
  number: number;
  user_id: number;
  user_login: string;
  title: string;
  body: string | null;
  state: "open" | "closed";
  draft: boolean;
  head_ref: string;
  head_sha: string;
  base_ref: string;
  created_at: string;
  updated_at: string;
  closed_at: string | null;
  merged_at: string | null;
  merge_commit_sha: string | null;
  stack_id: number | null;
  stack_position: number | null;
  /** Who merged it; null when not merged, or merged before forgekit kept it (schema version 5). */
  merged_by_id: number | null;
  merged_by_login: string | null;
}

/** A pull request as a stack lists it: its `pull_requests` entries, bottom to top. */
export type StackMember = Pick<
  PullRow,
  "stack_id" | "number" | "state" | "draft" | "merged_at" | "head_ref" | "head_sha"
>;

/** A stack. */
export interface StackRow {
  id: number;
  repo_id: number;
  number: number;
  base_ref: string;
  created_at: string;
}

/** A webhook. */
export interface HookRow {
  id: number;
  repo_id: number;
  url: string;
  secret: string | null;
  events: string[];
  active: boolean;
  /** How payloads are sent: a JSON body, or a form with the JSON in `payload` (GitHub's default). */
  content_type: "json" | "form";
  created_at: string;
  updated_at: string;
}

/** One delivery of a webhook event. */
export interface DeliveryRow {
  id: number;
  guid: string;
  hook_id: number;
  repo_id: number;
  event: string;
  action: string | null;
  payload: string;
  status: "pending" | "delivered" | "failed";
  attempts: number;
  next_attempt_at: number;
  status_code: number | null;
  duration_ms: number | null;
  delivered_at: string | null;
  redelivery: boolean;
  created_at: string;
}
